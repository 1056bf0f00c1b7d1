"""The user documentation: the README's quickstart runs as written, the API reference builds with
warnings as errors, and the troubleshooting page covers the reasons the backends actually print."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    paths = [ROOT / "core", *(ROOT / "backends" / b for b in ("opencl", "vulkan", "webgpu"))]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LITEGPU_")}
    return {**env, "PYTHONPATH": os.pathsep.join(map(str, paths))}


def _readme_block(section: str, lang: str) -> str:
    text = (ROOT / "README.md").read_text()
    part = text[text.index(section):]
    return re.search(rf"```{lang}\n(.*?)```", part, re.S).group(1)


def test_readme_keeps_its_two_opening_commands():
    first = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert first.splitlines()[0].startswith("apt-get update && apt-get install -y make python3-venv && make demo")
    assert first.splitlines()[1].startswith("make test")


@pytest.mark.mediapipe
def test_readme_quickstart_runs_as_written(mediapipe_models, tmp_path):
    pytest.importorskip("PIL")
    code = _readme_block("## Quickstart", "python")
    shutil.copytree(ROOT / "docs" / "assets", tmp_path / "docs" / "assets")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^face, score 0\.9\d, box \(xmin, ymin, xmax, ymax\) \[0\.3", proc.stdout, re.M), proc.stdout
    assert (tmp_path / "faces.png").read_bytes()[:4] == b"\x89PNG"
    # the command-line version of the same quickstart
    cmd = _readme_block("## Quickstart", "sh").splitlines()[1].split("#")[0].split()
    assert cmd[:2] == ["litegpu", "run"]
    proc = subprocess.run([sys.executable, "-m", "litegpu", *cmd[1:]], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "plan: " in proc.stdout and "detections (1," in proc.stdout


def test_api_reference_builds_with_warnings_as_errors(tmp_path):  # about 8 s: in the default run (CI)
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs and mkdocstrings are not installed (`make docs` installs them)")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "site" / "api" / "litegpu" / "index.html").read_text()
    assert "Build a ready (allocated)" in page  # load()'s docstring, rendered
    assert "MediaPipe's WEIGHTED non-max suppression" in (tmp_path / "site" / "api" / "mediapipe" / "index.html").read_text()


def test_troubleshooting_covers_what_the_backends_say():
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    sources = "".join(p.read_text() for p in (ROOT / "backends").glob("*/litegpu_*/*.py"))
    for reason in ("no OpenCL platform found", "pyopencl cannot be imported", "libvulkan cannot be loaded",
                   "no GLSL -> SPIR-V compiler", "wgpu found no WebGPU adapter",
                   "the Vulkan loader found no device"):
        assert reason in sources, f"the backends no longer say {reason!r}: update docs/troubleshooting.md"
        assert reason in page, f"docs/troubleshooting.md does not explain {reason!r}"
    for topic in ("/etc/OpenCL/vendors", "nvidia.icd", "libvulkan1", "glslc", "XDG_RUNTIME_DIR"):
        assert topic in page


def test_design_path_of_one_op_names_real_files_in_at_most_six_steps():
    """docs/design.md's path of DEPTHWISE_CONV_2D (issue 17: at most 6 files): every step names a file
    that exists and the function it names there, and the GPU steps agree with the op table."""
    text = (ROOT / "docs" / "design.md").read_text()
    part = text[text.index("**DEPTHWISE_CONV_2D from the file to its kernel**"):]
    steps = re.findall(r"^(\d)\. `([^`]+)` \(`#?([^`]+)`", part[:part.index("\n\n", part.index("\n1. "))], re.M)
    assert [int(n) for n, _, _ in steps] == list(range(1, len(steps) + 1)) and len(steps) <= 6, steps
    for _, path, name in steps[:-1]:
        src = ROOT / "core" / "litegpu" / path
        assert src.is_file(), path
        assert re.search(rf"^\s*(def|class) {name.split()[-1]}\b", src.read_text(), re.M), (path, name)
    assert steps[-1][1].endswith("shaders/conv.lgk") and (ROOT / steps[-1][1]).is_file()
    assert "#kernel depthwise_conv2d" in (ROOT / steps[-1][1]).read_text()

    from litegpu.gpu.ops import OPS, SPECS

    entry = OPS["DEPTHWISE_CONV_2D"]
    assert entry.lower.__module__ == entry.check.__module__ == "litegpu.gpu.ops.conv"
    assert SPECS[entry.kernel].file == "conv.lgk"
