"""Config loading bounded in time and memory for any input (issue 19 item 2)."""

from __future__ import annotations

import tracemalloc

import pytest
from litegpu import ConfigError
from litegpu._config import load_config


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for k in range(1, levels):
        refs = ", ".join([f"*a{k - 1}"] * width)
        lines.append(f"a{k}: &a{k} [{refs}]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast(tmp_path):
    p = tmp_path / "bomb.yaml"
    p.write_text(_bomb())
    assert len(p.read_bytes()) < 500
    load_config()  # plugins and the packaged default loaded outside the measurement
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as e:
            load_config(str(p))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20, f"{peak >> 20} MiB"  # was 2.2 GB (and 15 s) before the expansion bound
    assert e.value.path == "a5" and "aliases are expanded" in str(e.value)


def test_alias_bomb_under_a_known_key(tmp_path):
    p = tmp_path / "bomb.yaml"
    body = _bomb(levels=10).replace("\n", "\n  ")
    p.write_text("partition:\n  " + body)
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert e.value.path is not None and e.value.path.startswith("partition")


def test_deep_nesting_is_a_config_error(tmp_path):
    p = tmp_path / "deep.yaml"
    p.write_text("partition: " + "[" * 10000 + "]" * 10000 + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert "nest" in str(e.value)
    p.write_text("cache:\n" + "".join("  " * k + f"k{k}:\n" for k in range(1, 3000)) + "\n")
    with pytest.raises(ConfigError):
        load_config(str(p))


def test_deeply_nested_dict_is_a_config_error():
    d: dict = {}
    cur = d
    for _ in range(5000):
        cur["x"] = {}
        cur = cur["x"]
    with pytest.raises(ConfigError) as e:
        load_config({"backends": {"all": d}})
    assert e.value.path is not None


def test_size_cap(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert "larger than" in str(e.value)


@pytest.mark.parametrize("key", ["autoselect.tolerance", "autoselect.time_budget_s"])
@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf"])
def test_nan_and_inf_refused(tmp_path, key, text):
    section, name = key.split(".")
    p = tmp_path / "c.yaml"
    p.write_text(f"{section}:\n  {name}: {text}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert e.value.path == key and e.value.line == 2
    with pytest.raises(ConfigError):
        load_config({section: {name: float(text.replace(".", ""))}})


def test_anchors_within_bounds_still_work(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text("partition: &p\n  max_delegated_partitions: 2\nlogging:\n  level: info\n")
    assert load_config(str(p)).get("partition.max_delegated_partitions") == 2


def test_huge_value_message_is_short(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("logging:\n  level: [" + ", ".join(["abc"] * 20000) + "]\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(p))
    assert len(str(e.value)) < 400
