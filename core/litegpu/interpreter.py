"""``litegpu.interpreter``: the module layout of ``ai_edge_litert.interpreter``.

A script written for LiteRT ports by changing its import line only::

    from litegpu.interpreter import Interpreter, OpResolverType, load_delegate

:func:`load_delegate` takes a litegpu backend name (``"opencl"``, ``"vulkan"``...).  Given
the path of a shared library (a TFLite external delegate such as ``libedgetpu.so.1``) it
raises :class:`OSError` naming the library, as LiteRT does when it cannot open one:
litegpu runs its own delegates and cannot host TFLite's C delegates.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any

from ._backend_loading import load_delegate as _load_backend
from ._delegate import Delegate
from ._interpreter import Interpreter, SignatureRunner

__all__ = ["Interpreter", "SignatureRunner", "OpResolverType", "load_delegate", "Delegate"]


class OpResolverType(enum.Enum):
    """LiteRT's op resolver choices.  litegpu's CPU kernels are reference kernels whatever
    the choice; the values and names match LiteRT's so ``experimental_op_resolver_type``
    accepts them."""

    AUTO = 0
    BUILTIN = 1
    BUILTIN_REF = 2
    BUILTIN_WITHOUT_DEFAULT_DELEGATES = 3


_LIBRARY_SUFFIXES = (".so", ".dll", ".dylib")


def _is_library(name: str) -> bool:
    """A shared-library name or path (``libedgetpu.so.1``, ``/opt/x/delegate.dll``)."""
    base = os.path.basename(name)
    return (os.sep in name or "/" in name or any(s in base for s in _LIBRARY_SUFFIXES)
            or base.startswith("lib"))


def load_delegate(library: str | os.PathLike[str], options: Mapping[str, Any] | None = None) -> Delegate:
    """The delegate of litegpu backend ``library`` (a backend name) with ``options``.

    A path to a shared library raises :class:`OSError` naming it (LiteRT's error type for a
    library it cannot load); an unknown backend name raises
    :class:`litegpu.UnknownBackendError` listing the installed backends.
    """
    name = os.fspath(library)
    if isinstance(name, str) and _is_library(name):
        from ._plugins import backend_registry

        names = backend_registry().names()
        if name in names:  # a backend that happens to be called lib...
            return _load_backend(name, options)
        installed = ", ".join(names) or "none"
        why = ("is a TFLite external delegate library, which litegpu cannot load" if os.path.exists(name)
               else "cannot open shared object file: No such file or directory")
        raise OSError(f"{name}: {why}; litegpu loads its own GPU backends by name instead "
                      f"(installed: {installed}), e.g. load_delegate('opencl')")
    return _load_backend(name, options)
