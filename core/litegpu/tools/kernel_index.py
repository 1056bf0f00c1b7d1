"""The index of the built-in CPU kernels: ``python -m litegpu.tools.kernel_index [--write | --check]``.

``litegpu/cpu/_kernel_index.py`` tells the CPU kernel registry which kernel modules register a
kernel for which (op, dtype), so that ``import litegpu`` imports none of them and a model imports
only those its ops need (see :class:`litegpu.cpu._registry.BuiltinKernels`).  This tool writes it
from what the modules really register: run it with ``--write`` after adding or changing a kernel
registration (the test ``tests/test_cpu_lazy_kernels.py`` fails, naming this command, until then).
Without arguments it prints the file; ``--check`` exits 1 when the file is out of date.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["render_kernel_index", "INDEX_PATH", "main"]

INDEX_PATH = Path(__file__).resolve().parents[1] / "cpu" / "_kernel_index.py"

_HEADER = '''"""Which built-in CPU kernel module registers a kernel for which op and dtypes (generated).

Written by ``python -m litegpu.tools.kernel_index --write`` from what the modules register; do
not edit by hand.  op -> ((module relative to ``litegpu.cpu``, dtypes ("*": any)), ...), modules
in the order of ``litegpu.cpu.KERNEL_MODULES``.
"""

from __future__ import annotations

KERNEL_INDEX: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
'''


def render_kernel_index() -> str:
    """The text of ``cpu/_kernel_index.py`` for the kernel modules as they are now."""
    from litegpu.cpu import KERNEL_MODULES
    from litegpu.cpu._registry import CPU_KERNELS

    prefix = "litegpu.cpu."
    rank = {m: i for i, m in enumerate(KERNEL_MODULES)}
    lines = [_HEADER]
    for op, regs in sorted(CPU_KERNELS.builtin_entries().items()):
        per: dict[str, set[str]] = {}
        for module, dtypes, _versions in regs:
            per.setdefault(module.removeprefix(prefix), set()).update(dtypes)
        pairs = ", ".join(f"({m!r}, {tuple(sorted(ds))!r})" for m, ds in sorted(per.items(), key=lambda kv: rank[kv[0]]))
        lines.append(f"    {op!r}: ({pairs},),\n")
    lines.append("}\n")
    return "".join(lines).replace("'", '"')


def main(argv: list[str] | None = None) -> int:
    from . import generated_file_main

    return generated_file_main(INDEX_PATH, render_kernel_index, "litegpu.tools.kernel_index", argv)


if __name__ == "__main__":
    raise SystemExit(main())
