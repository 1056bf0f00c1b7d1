"""The litegpu plugin hooks (pluggy project name ``"litegpu"``).

A plugin is a module (or any object) with functions decorated by
:data:`hookimpl` whose names match the hooks below.  Third-party plugins are
found through the ``litegpu`` entry-point group::

    # pyproject.toml of your distribution
    [project.entry-points.litegpu]
    foo = "litegpu_foo.plugin"        # name = module holding the hookimpls

    # litegpu_foo/plugin.py
    import litegpu

    @litegpu.hookimpl
    def register_backends(register):
        from .backend import FooBackend
        register(FooBackend)

Every hook receives a ``register`` callback (or, for commands, a CLI object)
rather than returning values, so a plugin can register any number of things
and the core knows which plugin registered what.  Hooks are called once per
process, the first time litegpu needs plugins (listing or loading a backend,
building an interpreter), core plugins first and then entry points in
discovery order.  Implement only the hooks you need; keep module import cheap
(import GPU drivers inside ``availability()``/``create_delegate()``, not at
module top level).

A plugin whose import or hook raises is reported (a warning and a ``broken``
row in ``litegpu.get_plugins()``) and skipped; it never stops litegpu.
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = ["hookspec", "hookimpl", "PROJECT_NAME"]

PROJECT_NAME = "litegpu"

#: Marks the hook specifications below.
hookspec = pluggy.HookspecMarker(PROJECT_NAME)

#: Marks a plugin's hook implementations: ``@litegpu.hookimpl``.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def register_backends(register: Any) -> None:
    """Register the backends (delegate providers) this plugin offers.

    Arguments:
        register: ``register(backend)`` where ``backend`` is a
            :class:`litegpu.BackendSpec` subclass (instantiated once, without
            arguments) or an instance.  Call it once per backend.

    Returns:
        Nothing; the return value is ignored.

    When called:
        Once per process, when litegpu first needs the backend list
        (``litegpu.available_backends()``, ``litegpu.load_delegate()``,
        ``litegpu.load()``, the ``litegpu`` CLI).  ``register`` checks the
        spec at once: a spec without a name, without ``create_delegate``, with
        a bad ``option_schema`` or a name already taken is rejected with a
        message naming exactly what is missing ("backend 'foo' from plugin
        'litegpu-foo' does not define create_delegate"), shown as a warning
        and in ``get_plugins()``; the plugin's other backends still register.

    Example::

        @litegpu.hookimpl
        def register_backends(register):
            register(FooBackend)        # class FooBackend(litegpu.BackendSpec)
    """


@hookspec
def register_cpu_kernels(register: Any) -> None:
    """Register CPU reference kernels, typically for custom ops a plugin adds.

    Arguments:
        register: ``register(op, prepare, *, dtypes=None, versions=None)``,
            the same contract as ``@litegpu.register_kernel``: ``op`` is a
            builtin name (``"CONV_2D"``) or a custom code
            (``"MyCustomOp"``); ``prepare(ctx: NodeContext) -> Prepared`` runs
            once at ``allocate_tensors``; ``dtypes`` restricts the dtypes of
            the node's first input (``None`` = any); ``versions`` is a range of
            op versions (``None`` = any).  A kernel registered here wins over a
            built-in one with the same (op, dtype, version), so a plugin may
            also replace a built-in kernel.

    Returns:
        Nothing.

    When called:
        Once per process, before the first interpreter prepares its nodes,
        after the core's own kernels are registered.  Kernels stay registered
        for the life of the process.

    Example::

        @litegpu.hookimpl
        def register_cpu_kernels(register):
            def prepare(ctx):
                shape = ctx.inputs[0].shape
                return Prepared([shape], lambda ins: [np.sqrt(np.abs(ins[0]))])
            register("SqrtAbs", prepare, dtypes=["float32"])
    """


@hookspec
def register_commands(cli: Any) -> None:
    """Add subcommands to the ``litegpu`` command-line tool.

    Arguments:
        cli: the CLI's subcommand collection, an ``argparse`` sub-parsers
            object: call ``cli.add_parser(name, help=...)``, add arguments to
            the parser it returns, and ``set_defaults(func=handler)`` where
            ``handler(args) -> int`` returns the exit status.

    Returns:
        Nothing.

    When called:
        Each time the ``litegpu`` CLI builds its argument parser (once per
        command-line invocation), after the built-in subcommands exist; a
        name clash with a built-in subcommand is reported as a broken plugin.

    Example::

        @litegpu.hookimpl
        def register_commands(cli):
            p = cli.add_parser("foo-info", help="show Foo driver details")
            p.set_defaults(func=lambda args: print(foo_driver_info()) or 0)
    """
