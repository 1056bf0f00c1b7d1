"""The module named by the ``litegpu`` entry point.  litegpu imports it when it loads plugins,
so keep it cheap: import drivers inside ``availability()`` / ``create_delegate()``, not here."""

from __future__ import annotations

from typing import Any

import litegpu


@litegpu.hookimpl
def register_backends(register: Any) -> None:
    from .backend import MyBackend

    register(MyBackend)


# Other hooks you may implement (see litegpu.hookspecs for the full contract):
#
# @litegpu.hookimpl
# def register_cpu_kernels(register):      # CPU reference kernels for custom ops you add
#     register("MyCustomOp", prepare_fn, dtypes=["float32"])
#
# @litegpu.hookimpl
# def register_commands(cli):              # `litegpu mybackend-info`
#     cli.add_parser("mybackend-info").set_defaults(func=lambda args: 0)
