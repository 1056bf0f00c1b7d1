"""GLSL -> SPIR-V: the one compiler lookup and invocation, used by the Vulkan backend and the kernel tests.

Runs ``glslc`` (shaderc) or ``glslangValidator`` (glslang) as a subprocess on the GLSL that the
``glsl`` dialect renders.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .lgk import KernelTemplateError

__all__ = ["compile_spirv", "find_glsl_compiler"]


def find_glsl_compiler(preferred: str | None = None) -> str | None:
    """Path of the GLSL -> SPIR-V compiler: ``preferred`` (a name or path), else ``glslc``, else
    ``glslangValidator``; None when none is installed.  The one lookup the Vulkan backend and the
    kernel tests share."""
    if preferred:
        return shutil.which(preferred)
    return shutil.which("glslc") or shutil.which("glslangValidator")


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
            raise KernelTemplateError(f"GLSL compile failed ({Path(tool).name}):\n{r.stdout}{r.stderr}")
        return dst.read_bytes()
