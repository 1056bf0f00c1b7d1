"""pyopencl imported without importlib.metadata (litegpu_opencl._lean_import, issue 13): the version
modules it puts in place hold what pyopencl's and pytools' own files compute, a start on opencl does not
import importlib.metadata, and a version file other than the known one is left to the normal import."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyopencl")
from litegpu_opencl import _lean_import  # noqa: E402

_CHILD = r"""
import json, sys
from litegpu_opencl import _lean_import
_lean_import.prepare()
import pyopencl, pytools
_lean_import.finish()
lean = "importlib.metadata" not in sys.modules
import importlib.metadata as md
print(json.dumps({"lean": lean, "known": {n: _lean_import._version_module(n) is not None for n in ("pyopencl", "pytools")},
                  "got": [pyopencl.VERSION_TEXT, list(pyopencl.VERSION), pyopencl.VERSION_STATUS,
                          pytools.VERSION_TEXT, list(pytools.version.VERSION), pyopencl.version.VERSION_STATUS],
                  "want": [md.version("pyopencl"), md.version("pytools")]}))
"""


def test_pyopencl_imports_without_importlib_metadata_and_with_the_same_versions():
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=dict(os.environ),
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    want_cl, want_tools = d["want"]
    got = d["got"]
    assert got[0] == want_cl and got[3] == want_tools
    assert tuple(got[1]) == tuple(int(x) for x in want_cl.split(".")[:len(got[1])])
    if all(d["known"].values()):  # the installed releases' version.py is the known text
        assert d["lean"], "importlib.metadata was imported"


def test_an_unknown_version_file_is_left_to_the_normal_import(monkeypatch):
    assert _lean_import._version_module("pyopencl") is not None or True  # the installed one may differ
    monkeypatch.setattr(_lean_import, "_KNOWN", _lean_import._KNOWN + "# another release\n")
    assert _lean_import._version_module("pyopencl") is None
    assert _lean_import._version_module("pytools") is None


def test_the_switch_and_an_imported_pyopencl_leave_sys_modules_alone(monkeypatch):
    before = dict(sys.modules)
    monkeypatch.setattr(_lean_import, "ENABLED", False)
    _lean_import.prepare()
    assert dict(sys.modules) == before
    monkeypatch.setattr(_lean_import, "ENABLED", True)
    import pyopencl  # noqa: F401 - imported: prepare() has nothing to do

    before = dict(sys.modules)
    _lean_import.prepare()
    assert dict(sys.modules) == before
