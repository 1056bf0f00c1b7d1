"""The ``litegpu`` entry point: help on every subcommand, ``python -m litegpu.cli``, backends,
progress bars, argument errors."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import cli
from litegpu.cli._common import Progress

ROOT = Path(__file__).resolve().parents[2]

COMMANDS = [
    ["backends"], ["inspect"], ["run"], ["benchmark"], ["diff"], ["eval"], ["eval", "classification"],
    ["eval", "detection"], ["models"], ["models", "fetch"], ["models", "list"], ["autoselect"], ["cache"],
    ["cache", "list"], ["cache", "info"], ["cache", "clear"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=" ".join)
def test_help_everywhere(cmd):
    r = cli(*cmd, "--help")
    assert r.status == 0, r
    assert r.stdout.startswith("usage: litegpu " + " ".join(cmd))
    assert "--json" in r.stdout or cmd in (["eval"], ["models"], ["cache"])


def test_top_level_help_lists_commands():
    r = cli("--help")
    assert r.status == 0
    for c in ("backends", "inspect", "run", "benchmark", "diff", "eval", "models", "autoselect", "cache"):
        assert c in r.stdout


def test_usage_errors():
    r = cli()
    assert r.status == 2 and "usage: litegpu" in r.stderr
    r = cli("frobnicate")
    assert r.status == 2 and "invalid choice" in r.stderr
    r = cli("run")
    assert r.status == 2 and "the following arguments are required: model" in r.stderr


def test_backends_json_and_text(register_backend):
    register_backend("nodriver", available=False, reason="libfake.so not found")
    r = cli("backends", "--json")
    assert r.status == 0, r
    rows = {b["name"]: b for b in r.json()["backends"]}
    assert rows["cpu"]["available"] is True and rows["cpu"]["devices"] and rows["cpu"]["version"]
    assert rows["nodriver"] == {
        "name": "nodriver", "version": "9.9", "available": False, "reason": "libfake.so not found",
        "devices": [], "plugin": "test-nodriver", "description": "returns a - b for ADD (test backend)",
        "is_gpu": True}
    r = cli("backends")
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("nodriver"))
    assert "no" in line and "libfake.so not found" in line and "9.9" in line
    assert next(ln for ln in r.stdout.splitlines() if ln.startswith("cpu")).split()[2] == "yes"


def test_python_dash_m_entry_point(tmp_path, mlp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "core"), os.environ.get("PYTHONPATH", "")]),
               LITEGPU_DISABLE_PLUGIN_AUTOLOAD="1")
    p = subprocess.run([sys.executable, "-m", "litegpu.cli", "--version"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("litegpu ")
    p = subprocess.run([sys.executable, "-m", "litegpu.cli", "inspect", str(mlp_path), "-b", "cpu", "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["op_histogram"]["FULLY_CONNECTED"] == 2
    p = subprocess.run([sys.executable, "-m", "litegpu.cli", "run", str(tmp_path / "absent.tflite")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "litegpu run: error: model file not found" in p.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_only_when_enabled_and_slow():
    s = io.StringIO()
    with Progress("work", 4, enabled=True, delay=0.0, stream=s) as p:
        for _ in range(4):
            p.update()
    text = s.getvalue()
    assert "work [" in text and "4/4" in text and text.endswith("\n")
    quiet = io.StringIO()
    with Progress("work", 4, enabled=False, delay=0.0, stream=quiet) as p:
        p.update(4)
    assert quiet.getvalue() == ""
    fast = _Tty()
    with Progress("work", 4, enabled=True, delay=60.0, stream=fast) as p:  # finishes before the delay
        p.update(4)
    assert fast.getvalue() == ""


def test_progress_flag_on_commands(mlp_path, monkeypatch):
    import litegpu.cli._common as common

    made = []
    real = common.make_progress

    def spy(args, label, total=None):
        bar = real(args, label, total)
        made.append((label, bar.enabled, total))
        return bar

    monkeypatch.setattr("litegpu.cli._benchmark.make_progress", spy)
    assert cli("benchmark", mlp_path, "--num-runs", "2", "--progress", "--json").status == 0
    assert made == [("benchmark cpu", True, 1 + 1 + 2)]
    made.clear()
    assert cli("benchmark", mlp_path, "--num-runs", "2", "--json").status == 0
    assert made == [("benchmark cpu", False, 4)]  # captured stderr is not a terminal


def test_plugin_adds_a_command(register_backend):
    import litegpu

    class Plugin:
        @litegpu.hookimpl
        def register_commands(self, cli):
            p = cli.add_parser("hello-plugin", help="say hello")
            p.add_argument("--name", default="world")
            p.set_defaults(func=lambda args: print(f"hello {args.name}") or 3)

    register_backend("hello", Plugin())
    r = cli("hello-plugin", "--name", "litegpu")
    assert r.status == 3 and r.stdout == "hello litegpu\n"
    assert "hello-plugin" in cli("--help").stdout
