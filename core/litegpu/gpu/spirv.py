"""GLSL -> SPIR-V: the one compiler lookup and invocation, used by the Vulkan backend and the kernel tests.

Runs ``glslc`` (shaderc) or ``glslangValidator`` (glslang) as a subprocess on the GLSL that the
``glsl`` dialect renders.
"""

from __future__ import annotations

import os
from pathlib import Path

from ._dialects._markers import GLSL_NO_CONTRACTION as NO_CONTRACTION

__all__ = ["compile_spirv", "find_glsl_compiler", "no_contraction"]

# SPIR-V opcodes (the SPIR-V specification, section 3.49): float arithmetic whose result a driver may
# fuse into a multiply-add unless the result is decorated NoContraction
_OP_DECORATE, _NO_CONTRACTION = 71, 42
_ANNOTATIONS = {71, 72, 73, 74, 75, 332, 5632, 5633}  # OpDecorate ... OpMemberDecorateString
_CONTRACTIBLE = {129, 131, 133, 142, 143, 144, 145, 146}  # FAdd FSub FMul VectorTimesScalar ... MatrixTimesMatrix


def find_glsl_compiler(preferred: str | None = None) -> str | None:
    """Path of the GLSL -> SPIR-V compiler: ``preferred`` (a name or path), else ``glslc``, else
    ``glslangValidator``; None when none is installed.  The one lookup the Vulkan backend and the
    kernel tests share."""
    if preferred:
        return _which(preferred)
    return _which("glslc") or _which("glslangValidator")


def _which(cmd: str) -> str | None:
    """``shutil.which(cmd)`` on POSIX, without importing shutil: its import loads zlib, bz2 and lzma,
    2 ms of the caller's thread in every warm vulkan start (which looks the compiler up, to fail at
    ``load_delegate`` when there is none, and then runs none); elsewhere shutil's (PATHEXT)."""
    if os.name != "posix":
        import shutil

        return shutil.which(cmd)

    def runnable(path: str) -> bool:
        return os.path.exists(path) and os.access(path, os.F_OK | os.X_OK) and not os.path.isdir(path)

    if os.path.dirname(cmd):
        return cmd if runnable(cmd) else None
    search = os.environ.get("PATH")
    if search is None:
        try:
            search = os.confstr("CS_PATH")
        except (AttributeError, ValueError):
            search = os.defpath
    if not search:
        return None
    seen = set()
    for d in search.split(os.pathsep):
        if d in seen:
            continue
        seen.add(d)
        path = os.path.join(d, cmd)
        if runnable(path):
            return path
    return None


def compile_spirv(source: str, *, compiler: str | None = None, vulkan: str = "vulkan1.1") -> bytes:
    """Compile GLSL compute source to SPIR-V bytes with glslc or glslangValidator.

    Raises ``KernelTemplateError`` with the compiler's message when the source does not compile,
    and ``FileNotFoundError`` when neither compiler is installed.
    """
    tool = compiler or find_glsl_compiler()
    if tool is None:
        raise FileNotFoundError("no GLSL compiler: install glslc or glslangValidator (Debian glslc / glslang-tools)")
    import subprocess  # here, not at the top: a warm start (SPIR-V from the cache) runs no compiler
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d, "k.comp"), Path(d, "k.spv")
        src.write_text(source)
        if Path(tool).name.startswith("glslc"):
            cmd = [tool, f"--target-env={vulkan}", "-fshader-stage=compute", "-O", str(src), "-o", str(dst)]
        else:
            cmd = [tool, "-V", "--target-env", vulkan, "-S", "comp", str(src), "-o", str(dst)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            from .lgk import KernelTemplateError  # the kernel language's error, imported by a failure only

            raise KernelTemplateError(f"GLSL compile failed ({Path(tool).name}):\n{r.stdout}{r.stderr}")
        spirv = dst.read_bytes()
    return no_contraction(spirv) if NO_CONTRACTION in source else spirv


def no_contraction(spirv: bytes) -> bytes:
    """``spirv`` with every float add, subtract and multiply decorated ``NoContraction``: the driver may
    not fuse them into multiply-adds of its choosing (Mesa, NVIDIA and others do, across statements).
    What GLSL's ``precise`` does per variable, for a whole module whose multiply-adds the renderer
    already made explicit ``fma`` calls (the OpenCL source says ``FP_CONTRACT OFF`` for the same)."""
    from .lgk import KernelTemplateError  # (after a compile: a cold start, whose renderer imported lgk)

    words = memoryview(spirv).cast("I")
    if len(words) < 5 or words[0] != 0x07230203:
        raise KernelTemplateError("not a SPIR-V module (bad magic number)")
    ids, insert_at, i = [], 5, 5
    while i < len(words):
        n, op = words[i] >> 16, words[i] & 0xFFFF
        if n == 0:
            raise KernelTemplateError("malformed SPIR-V: an instruction of word count 0")
        if op in _ANNOTATIONS:
            insert_at = i + n
        elif op in _CONTRACTIBLE:
            ids.append(words[i + 2])  # result type, result id, operands...
        i += n
    if not ids:
        return spirv
    head, tail = bytes(words[:insert_at]), bytes(words[insert_at:])
    import array

    deco = array.array("I", [w for rid in ids for w in ((3 << 16) | _OP_DECORATE, rid, _NO_CONTRACTION)])
    return head + deco.tobytes() + tail
