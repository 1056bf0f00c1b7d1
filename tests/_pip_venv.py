"""A fresh venv that pip-installs parts of this checkout as a user would, offline.

Used by the tests that check a backend or plugin is found through its installed entry points. The venv
sees none of the project venv's litegpu distributions (so "installed" and "uninstalled" mean what they
say), but it does see every third-party package the project venv has (numpy, pluggy, setuptools, wheel,
...) through an overlay folder of links named in a .pth file: the build runs offline with
--no-build-isolation, so setuptools and wheel must come from somewhere, and a venv made with
--system-site-packages sees the base interpreter's packages, not the project venv's (on a fresh machine the
base Python has setuptools 65 and no wheel, which cannot build our pyprojects).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a source distribution of the core needs besides its package folder (folders that do not exist in a
# checkout are skipped, so the list may name the old and the new layout alike).
CORE_PARTS = ("core", "pyproject.toml", "README.md", "LICENSE")


def _overlay(dest: Path) -> Path:
    """Links to every entry of this environment's site-packages except litegpu's own distributions."""
    dest.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("litegpu", "__editable__", "_litegpu")) or name.endswith(".pth"):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


class FreshVenv:
    """``FreshVenv(tmp_path)``: a venv in ``tmp_path/venv``; ``install(*parts)`` copies those parts of the
    checkout (relative paths; ``"core"`` means the core distribution) and pip-installs each, no deps, no
    index; ``run(code)`` runs Python code in the venv and returns the completed process."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.src = tmp_path / "src"  # built from a copy: nothing (build/, *.egg-info) lands in the checkout
        self.venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True)
        self.python = str(self.venv / "bin" / "python")
        site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        Path(site, "_litegpu_test_overlay.pth").write_text(str(_overlay(tmp_path / "overlay")) + "\n")
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "LITEGPU_PLUGINS", "LITEGPU_DISABLE_PLUGIN_AUTOLOAD")}
        self.env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")

    def _copy(self, part: str) -> Path:
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
        names = CORE_PARTS if part == "core" else (part,)
        for name in names:
            s, d = ROOT / name, self.src / name
            if d.exists() or not s.exists():
                continue
            if s.is_dir():
                shutil.copytree(s, d, ignore=ignore, symlinks=True)
            else:
                d.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(s, d)
        return self.src if part == "core" else self.src / part

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pip", "--python", self.python, *args], env=self.env,
                              cwd=self.tmp, capture_output=True, text=True)

    def install(self, *parts: str) -> None:
        for part in parts:
            r = self.pip("install", "-q", "--no-deps", "--no-build-isolation", str(self._copy(part)))
            assert r.returncode == 0, f"pip install {part}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"

    def uninstall(self, dist: str) -> None:
        r = self.pip("uninstall", "-y", "-q", dist)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]

    def run(self, code: str, *args: str) -> subprocess.CompletedProcess:
        script = self.tmp / "check.py"
        script.write_text(code)
        return subprocess.run([self.python, str(script), *args], env=self.env, cwd=self.tmp,
                              capture_output=True, text=True)
