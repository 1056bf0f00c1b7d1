"""What a warm start reads instead of importing: the reader's generated table of the ``tflite`` package's
layouts (regenerated and compared, and a code it lacks still found in the package), the plugin scan's
own reading of ``entry_points.txt`` (compared with ``importlib.metadata`` on this machine's path and on
made-up distributions), and a process that reads a model and scans plugins importing neither."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _fake_dists import make_dist
from litegpu.testing import ModelBuilder

ROOT = Path(__file__).resolve().parents[1]


# ---- the reader's layout table --------------------------------------------------------------------


def test_tflite_layout_is_up_to_date():
    """``_tflite_layout.py`` holds exactly what the installed ``tflite`` package's generated classes
    say (every table's fields, the enums, the unions): regenerated here and compared."""
    from litegpu.tools.tflite_layout import LAYOUT_PATH, render_tflite_layout

    assert LAYOUT_PATH.read_text() == render_tflite_layout(), (
        "litegpu/_tflite_layout.py does not match the installed tflite package: "
        "run python -m litegpu.tools.tflite_layout --write")


def test_static_layouts_equal_the_probed_classes():
    """Each table's layout as read from the file is field for field the one learnt from its class."""
    import importlib

    from litegpu._flatbuf import class_fields, layout
    from litegpu._tflite_layout import TABLES

    for name in TABLES:
        probed = class_fields(getattr(importlib.import_module(f"tflite.{name}"), name))
        static = layout(name).fields
        assert [(f.accessor, f.slot, f.kind, f.dtype, f.default) for f in static] == \
            [(f.accessor, f.slot, f.kind, f.dtype, f.default) for f in probed], name
        assert [f.table for f in static] == [None if f.table is None else f.table.__name__ for f in probed], name


def test_a_code_the_table_lacks_comes_from_the_package(monkeypatch):
    """A newer ``tflite`` package than the table: an options type, operator or tensor type the table
    does not list is looked up in the package (as before the table), not refused."""
    from litegpu import _schema, _tflite_layout
    from litegpu._reader import read_model

    conv_code = next(k for k, v in _tflite_layout.UNIONS["BuiltinOptions"].items() if v == "Conv2DOptions")
    unions = {u: dict(m) for u, m in _tflite_layout.UNIONS.items()}
    del unions["BuiltinOptions"][conv_code]
    ops = {k: v for k, v in _tflite_layout.BUILTIN_OPS.items() if v != "CONV_2D"}
    types = {k: v for k, v in _tflite_layout.TENSOR_TYPES.items() if v != "int8"}
    monkeypatch.setattr(_tflite_layout, "UNIONS", unions)
    monkeypatch.setattr(_tflite_layout, "BUILTIN_OPS", ops)
    monkeypatch.setattr(_tflite_layout, "TENSOR_TYPES", types)
    for fn in (_schema.builtin_op_names, _schema.tensor_type_names, _schema._builtin_codes):
        fn.cache_clear()
    try:
        b = ModelBuilder()
        x = b.input("x", (1, 4, 4, 1), "int8", quant=(0.5, 0))
        w = b.const("w", np.ones((1, 1, 1, 1), np.int8), quant=(0.5, 0))
        y = b.tensor("y", (1, 2, 2, 1), "int8", quant=(0.5, 0))
        b.op("CONV_2D", [x, w], [y], padding=1, stride_w=2, stride_h=2, dilation_w_factor=1,
             dilation_h_factor=1, fused_activation_function=0)
        b.output(y)
        op = read_model(b.build()).subgraphs[0].operators[0]
        assert op.name == "CONV_2D" and op.options["stride_w"] == 2 and op.options["padding"] == 1
        assert read_model(b.build()).subgraphs[0].tensors[0].dtype == "int8"
    finally:
        for fn in (_schema.builtin_op_names, _schema.tensor_type_names, _schema._builtin_codes):
            fn.cache_clear()


# ---- the entry-point scan -------------------------------------------------------------------------


def _eps(found) -> list[tuple]:
    return [(e.name, e.value, e.group, e.dist.name, e.dist.version, str(e.dist.locate_file(""))) for e in found]


def _both(group: str) -> tuple[list[tuple], list[tuple]]:
    import importlib.metadata as metadata

    from litegpu._entry_points import entry_points

    return _eps(entry_points(group)), _eps(metadata.entry_points(group=group))


def test_entry_point_scan_finds_what_importlib_metadata_finds(tmp_path, monkeypatch):
    """On this machine's path (every group any installed distribution declares) and on made-up
    site directories: two copies of one distribution (the first on the path wins, as
    ``importlib.metadata`` has it, whatever the spelling of its name), an ``.egg-info`` directory,
    comments, extras, a distribution without entry points."""
    import importlib.metadata as metadata

    from litegpu._entry_points import _infos

    groups = sorted({ep.group for d in metadata.distributions() for ep in d.entry_points})
    groups += ["litegpu", "no-such-group"]
    for group in groups:
        mine, theirs = _both(group)
        assert _infos() is not None
        assert mine == theirs, group

    first, second = tmp_path / "first", tmp_path / "second"
    make_dist(first, "litegpu-fake-a", {"a": "fake_a_mod"}, {}, "1.0")
    make_dist(second, "litegpu_fake.a", {"a2": "fake_a_mod2"}, {}, "2.0")  # the same name, shadowed
    make_dist(second, "litegpu-fake-b", {"b": "fake_b_mod:Thing.attr [extra1]"}, {}, "0.3")
    egg = second / "litegpu_fake_c.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: litegpu-fake-c\nVersion: 4.5\n\nName: not-this\n")
    (egg / "entry_points.txt").write_text("# a comment\n[console_scripts]\nc = fake_c:main\n\n[litegpu]\nc = fake_c\n")
    plain = second / "litegpu_fake_d-1.0.dist-info"
    plain.mkdir()
    (plain / "METADATA").write_text("Name: litegpu-fake-d\nVersion: 1.0\n")
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))
    for group in ("litegpu", "console_scripts"):
        mine, theirs = _both(group)
        assert mine == theirs, group
    names = {e[0] for e in _both("litegpu")[0]}
    assert {"a", "b", "c"} <= names and "a2" not in names


def test_entry_point_scan_leaves_a_zip_on_the_path_to_importlib_metadata(tmp_path, monkeypatch):
    """A zip file on ``sys.path`` is not read by the scan: ``importlib.metadata`` answers instead."""
    from litegpu._entry_points import _infos, entry_points

    z = tmp_path / "dists.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("litegpu_fake_z-1.0.dist-info/METADATA", "Name: litegpu-fake-z\nVersion: 1.0\n")
        f.writestr("litegpu_fake_z-1.0.dist-info/entry_points.txt", "[litegpu]\nz = fake_z\n")
    monkeypatch.syspath_prepend(str(z))
    assert _infos() is None
    assert "z" in {e.name for e in entry_points("litegpu")}


def test_entry_point_load_resolves_module_and_attribute():
    from litegpu._entry_points import EntryPoint

    assert EntryPoint("x", "os.path:join", "g").load() is os.path.join
    assert EntryPoint("x", "json", "g").load() is json
    with pytest.raises(ValueError):
        EntryPoint("x", "not a value!", "g").load()


# ---- a fresh process --------------------------------------------------------------------------------


def test_reading_a_model_and_scanning_plugins_import_neither_tflite_nor_importlib_metadata(tmp_path):
    b = ModelBuilder()
    x = b.input("x", (1, 4), "float32")
    y = b.tensor("y", (1, 4), "float32")
    b.op("RELU", [x], [y])
    b.output(y)
    path = tmp_path / "relu.tflite"
    path.write_bytes(b.build())
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "core"), env.get("PYTHONPATH", "")) if p)
    env["LITEGPU_PLUGINS"] = "example"  # the scan runs; only the small example plugin is imported
    code = (
        "import json, sys, litegpu\n"
        f"m = litegpu.read_model({str(path)!r})\n"
        "names = [b.name for b in litegpu.available_backends()]\n"
        "print(json.dumps({'ops': [o.name for o in m.subgraphs[0].operators], 'backends': names, 'loaded': "
        "sorted(k for k in sys.modules if k == 'tflite' or k.startswith('tflite.') or k == 'importlib.metadata')}))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["ops"] == ["RELU"]
    assert got["loaded"] == [], f"a model read and a plugin scan imported {got['loaded']}"
