"""``litegpu inspect``: I/O, op histogram, plans per backend with reasons, describe(), SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from _cli_helpers import cli

SVG = "{http://www.w3.org/2000/svg}"


def test_inspect_json_cpu(mlp_path):
    r = cli("inspect", mlp_path, "--backend", "cpu", "--json")
    assert r.status == 0, r
    d = r.json()
    assert [(i["name"], i["shape"], i["dtype"]) for i in d["inputs"]] == [("x", [1, 4], "float32"),
                                                                          ("z", [1, 3], "float32")]
    assert [(o["name"], o["shape"]) for o in d["outputs"]] == [("sum:0", [1, 3]), ("prob", [1, 3])]
    assert d["op_histogram"] == {"FULLY_CONNECTED": 2, "ADD": 1, "LOGISTIC": 1}
    assert d["operators"] == 4 and d["subgraphs"] == 1 and len(d["sha256"]) == 64
    (plan,) = d["plans"]
    assert plan["backend"] == "cpu" and plan["nodes_on_backend"] == 4 and plan["cpu_nodes"] == []
    assert d["autoselect"] is None


def test_inspect_plan_with_reasons(mlp_path, example_backend, register_backend):
    register_backend("wrongadd")
    r = cli("inspect", mlp_path, "-b", "example", "-b", "wrongadd", "--json")
    assert r.status == 0, r
    ex, wrong = r.json()["plans"]
    assert [(s["backend"], s["node_indices"]) for s in ex["segments"]] == [("cpu", [0, 1]), ("example", [2, 3])]
    assert ex["nodes_on_backend"] == 2 and ex["partitions"] == 1
    assert [(c["node"], c["op"], c["kind"]) for c in ex["cpu_nodes"]] == [
        (0, "FULLY_CONNECTED", "declined"), (1, "FULLY_CONNECTED", "declined")]
    assert ex["cpu_nodes"][0]["reason"] == "not an elementwise op this backend implements"
    assert ex["partition_descriptions"][0]["describe"]["ops"] == ["ADD", "LOGISTIC"]
    assert [(s["backend"], s["node_indices"]) for s in wrong["segments"]] == [
        ("cpu", [0, 1]), ("wrongadd", [2]), ("cpu", [3])]
    assert {c["node"]: c["reason"] for c in wrong["cpu_nodes"]} == {
        0: "FULLY_CONNECTED is not ADD", 1: "FULLY_CONNECTED is not ADD", 3: "LOGISTIC is not ADD"}
    desc = wrong["partition_descriptions"][0]
    assert desc["transformations"] == [{"pass": "add-to-sub (deliberately wrong)", "details": []}]
    assert desc["memory_bytes"] == 4096
    assert wrong["planned_device_memory_bytes"] == 4096


def test_inspect_text(mlp_path, register_backend):
    register_backend("wrongadd")
    r = cli("inspect", mlp_path, "-b", "cpu", "-b", "wrongadd", "-b", "nosuch")
    assert r.status == 0, r
    for text in ("op histogram", "FULLY_CONNECTED      2", "execution plan on wrongadd: 1 of 4 nodes",
                 "FULLY_CONNECTED is not ADD: FULLY_CONNECTED x2 (#0-1)",
                 "transformations:\n    add-to-sub (deliberately wrong)", "planned device memory: 4.0 KiB",
                 "execution plan on nosuch: not available: unknown backend 'nosuch'",
                 "auto-selection: no cached decision"):
        assert text in r.stdout, text
    r = cli("inspect", mlp_path, "-b", "wrongadd", "--all-nodes")
    assert "#3 LOGISTIC: LOGISTIC is not ADD" in r.stdout


def test_inspect_svg(tmp_path, mlp_path, example_backend):
    svg = tmp_path / "g.svg"
    r = cli("inspect", mlp_path, "-b", "cpu", "-b", "example", "--svg", svg)
    assert r.status == 0, r
    root = ET.parse(svg).getroot()
    assert root.tag == SVG + "svg"
    groups = [g for g in root.iter(SVG + "g") if g.get("data-key")]
    ops = {g.get("data-key"): g.get("data-backend") for g in groups if "op" in g.get("class", "").split()}
    assert ops == {"op0": "cpu", "op1": "cpu", "op2": "example", "op3": "example"}  # the example plan
    io = [g.get("data-key") for g in groups if g.get("data-backend") == "io"]
    assert sorted(io) == ["in0", "in1", "out8", "out9"]
    fills = {g.get("data-key"): g.find(SVG + "rect").get("fill") for g in groups if g.get("data-key") in ops}
    assert fills["op0"] == fills["op1"] != fills["op2"] == fills["op3"]
    strokes = {g.get("data-key"): g.find(SVG + "rect").get("stroke") for g in groups if g.get("data-key") in ops}
    assert sorted(k for k, s in strokes.items() if s == "#d62728") == ["op0", "op1"]  # declined: red outline
    legend = next(g for g in root.iter(SVG + "g") if g.get("class") == "legend")
    assert [t.text for t in legend.iter(SVG + "text")] == ["cpu", "example", "declined by the delegate"]
    edges = next(g for g in root.iter(SVG + "g") if g.get("class") == "edges")
    assert len(list(edges)) == 7  # x->fc0, fc0->fc1, fc1->add, z->add, add->logistic, add->sum:0, logistic->prob
    tips = [t.text for t in root.iter(SVG + "title")]
    assert any("node #0 FULLY_CONNECTED v1 on cpu\nnot an elementwise op" in (t or "") for t in tips)


def test_inspect_errors(tmp_path, mlp_path):
    r = cli("inspect", tmp_path / "none.tflite")
    assert r.status == 2 and "model file not found" in r.stderr
    r = cli("inspect", mlp_path, "--svg", tmp_path / "no" / "such" / "dir" / "g.svg")
    assert r.status == 2 and "cannot write" in r.stderr


def test_inspect_folded_nodes(tmp_path, register_backend):
    import numpy as np
    from litegpu.testing import ModelBuilder

    register_backend("wrongadd")
    b = ModelBuilder()
    a = b.input("a", (1, 8), "float32")
    w16 = b.const("w16", np.arange(8, dtype=np.float16).reshape(1, 8))
    w = b.tensor("w", (1, 8), "float32")
    b.op("DEQUANTIZE", [w16], [w])
    o = b.tensor("out", (1, 8), "float32")
    b.op("ADD", [a, w], [o])
    b.output(o)
    model = tmp_path / "fold.tflite"
    model.write_bytes(b.build())
    r = cli("inspect", model, "-b", "wrongadd", "--svg", tmp_path / "f.svg", "--json")
    assert r.status == 0, r
    (p,) = r.json()["plans"]
    assert p["folded_nodes"] == [0] and p["cpu_nodes"] == [] and p["partitions"] == 1
    assert [s["backend"] for s in p["segments"]][-1] == "wrongadd"
    r = cli("inspect", model, "-b", "wrongadd")
    assert "1 node(s) constant-folded at prepare (run once, by no backend): DEQUANTIZE" in r.stdout
