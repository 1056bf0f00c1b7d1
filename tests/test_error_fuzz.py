"""Errors say what is wrong (issue 19 item 6): mutated models go through the whole Interpreter
(read, allocate_tensors, set_tensor, invoke) and either run or raise a typed litegpu error whose
message has no Python internals in it.  Seeded and sampled: ``LITEGPU_ERROR_FUZZ_N`` mutations per
model class (default 2,000, a few tens of seconds); the longer run in docs/reliability.md used
20,000 per class."""

from __future__ import annotations

import collections
import os
import re

import litegpu
import numpy as np
import pytest
from test_fuzz import _KINDS, _SMALL, TESTDATA, _builder_model, _mutate

N_PER_CLASS = int(os.environ.get("LITEGPU_ERROR_FUZZ_N", "2000"))

# Words of Python's own errors: a user cannot act on them.
_INTERNALS = re.compile(
    r"NoneType|object has no attribute|cannot reshape array|list index out of range|index out of range|"
    r"KeyError|IndexError|AttributeError|OverflowError|TypeError|ZeroDivisionError|unhashable|"
    r"not subscriptable|Traceback|unsupported operand|invalid literal for int|takes \d+ positional|"
    r"object is not|numpy\.|np\.")


def _classes() -> dict[str, list[bytes]]:
    out = {"ModelBuilder": [_builder_model()]}
    if TESTDATA.is_dir():
        small = [(TESTDATA / f"{n}.bin").read_bytes() for n in _SMALL if (TESTDATA / f"{n}.bin").exists()]
        if small:
            out["litert-testdata"] = small
    return out


_MAX_ELEMENTS = 1 << 22  # a mutated shape may ask for 10^8 elements: slow to compute, not an error


class _TooBig(Exception):
    pass


def _run(data: bytes) -> None:
    it = litegpu.Interpreter(model_content=data)
    it.allocate_tensors()
    for spec in it._main.plan.specs:
        if spec.shape is not None and int(np.prod(spec.shape, dtype=np.float64)) > _MAX_ELEMENTS:
            raise _TooBig
    for d in it.get_input_details():
        if d["dtype"] in (np.bytes_, np.object_):
            continue
        it.set_tensor(d["index"], np.ones(d["shape"], d["dtype"]))
    it.invoke()
    for d in it.get_output_details():
        it.get_tensor(d["index"])


def fuzz_class(models: list[bytes], n: int, seed: int) -> tuple[collections.Counter, list[str]]:
    rng = np.random.default_rng(seed)
    outcomes: collections.Counter[str] = collections.Counter()
    bad: list[str] = []
    for k in range(n):
        base = models[k % len(models)]
        kind = _KINDS[int(rng.integers(len(_KINDS)))]
        data = _mutate(base, rng, kind)
        try:
            _run(data)
        except _TooBig:
            outcomes["allocated, not invoked (a tensor over 4M elements)"] += 1
        except litegpu.LiteGPUError as e:
            msg = str(e)
            if _INTERNALS.search(msg):
                outcomes["typed error with Python internals"] += 1
                bad.append(f"{type(e).__name__}: {msg[:200]}")
            else:
                outcomes[f"typed error ({type(e).__name__})"] += 1
        except (ValueError, TypeError, RuntimeError) as e:
            # LiteRT's own types for API misuse (set_tensor shape checks): allowed only with a clear message
            if _INTERNALS.search(str(e)):
                bad.append(f"{type(e).__name__}: {str(e)[:200]}")
                outcomes["untyped error with Python internals"] += 1
            else:
                outcomes[f"LiteRT-style error ({type(e).__name__})"] += 1
        except Exception as e:  # noqa: BLE001 - anything else is a bug
            outcomes[f"crash ({type(e).__name__})"] += 1
            bad.append(f"{type(e).__name__}: {str(e)[:200]}")
        else:
            outcomes["ran"] += 1
    return outcomes, bad


@pytest.mark.parametrize("cls", ["ModelBuilder", "litert-testdata"])
def test_errors_from_mutated_models_name_the_problem(cls):
    classes = _classes()
    if cls not in classes:
        pytest.skip(f"{cls} models not found in {TESTDATA}")
    outcomes, bad = fuzz_class(classes[cls], N_PER_CLASS, seed=19)
    print(f"\n{cls}: {N_PER_CLASS} mutations: {dict(outcomes)}")
    assert sum(outcomes.values()) == N_PER_CLASS >= 2000 or "LITEGPU_ERROR_FUZZ_N" in os.environ
    assert not bad, f"{len(bad)} of {N_PER_CLASS}: " + "\n".join(collections.Counter(bad).most_common(12).__repr__()
                                                                  .split("), ("))
