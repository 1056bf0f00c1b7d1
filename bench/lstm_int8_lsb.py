"""Where the GPU float view's 1-LSB differences on int8 (8x8_16) LSTMs come from.  CPU only, no GPU.

Usage: ``PYTHONPATH=core:tests/quant:tests python bench/lstm_int8_lsb.py [--models N]``

Runs builder-made full-integer UNIDIRECTIONAL_SEQUENCE_LSTM models on litegpu's CPU kernel (bit-exact
with LiteRT's) and records every time step's integer state (x, h, c -> h', c').  From each recorded
state it recomputes one step the way the float view does (float gates, float cell update, c snapped
to its int16 grid, h to its int8 grid), then with one more stage at a time done in LiteRT's integers
(Q3.12 gate pre-activations by MultiplyByQuantizedMultiplier, the gemmlowp sigmoid/tanh tables, the
rounding-shift cell update, the hidden requantization), and, separately, with every intermediate
snapped to LiteRT's grid by float rounding.  Prints how many h' (int8) and c' (int16) values differ
from LiteRT's.  Single steps from the exact state, so no error carries over between steps.
"""

from __future__ import annotations

import argparse

import numpy as np
from litegpu.cpu.quantized import recurrent as R
from litegpu.cpu.quantized._fixedpoint import mul_by_quantized_multiplier, rdbpot, wrap16, wrap32
from litegpu.testing import run_litegpu
from test_quant_recurrent import integer_lstm_model

Record = tuple[object, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _real(m_s: tuple[int, int]) -> float:
    m, s = m_s
    return float(m) * 2.0 ** (s - 31)


def _round(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _hidden_scale(lstm) -> float:
    return 1.0 / (_real(lstm.hidden_mult) * 2.0 ** 30)  # hidden_mult = 2^-30 / hidden scale


def staged(lstm, x, h, c, exact_z: bool, exact_act: bool, exact_cell: bool, exact_h: bool):
    """One step; each flag makes one more stage LiteRT's integer arithmetic (in this order)."""
    gates = {}
    for g in lstm.gates:
        accx = wrap32(x @ lstm.w_x[g] + lstm.bx[g])
        acch = wrap32(h @ lstm.w_h[g] + lstm.bh[g])
        if exact_z:
            z = np.clip(mul_by_quantized_multiplier(accx, *lstm.mx[g]), -32768, 32767)
            z = np.clip(mul_by_quantized_multiplier(acch, *lstm.mh[g]) + z, -32768, 32767)
            zr = z * 2.0 ** -12
        else:
            zr = (accx * _real(lstm.mx[g]) + acch * _real(lstm.mh[g])) * 2.0 ** -12
        if exact_act:
            zi = z if exact_z else np.clip(np.round(zr * 4096), -32768, 32767).astype(np.int64)
            gates[g] = R._act16(lstm.tanh_gate if g == "c" else lstm.sigmoid, zi) * 2.0 ** -15
        else:
            gates[g] = np.tanh(zr) if g == "c" else _sigmoid(zr)
    cs = lstm.cell_scale
    if exact_cell and exact_act:
        i, f, gg = (np.round(gates[k] * 32768).astype(np.int64) for k in "ifc")
        cn = np.clip(wrap16(rdbpot(f * c, 15)) + wrap16(rdbpot(i * gg, 30 + cs)), -32768, 32767)
    else:
        v = (gates["f"] * c * 2.0 ** cs + gates["i"] * gates["c"]) / 2.0 ** cs
        cn = np.clip(_round(v), -32768, 32767).astype(np.int64)
    if exact_h and exact_act:
        o = np.round(gates["o"] * 32768).astype(np.int64)
        hn = np.clip(mul_by_quantized_multiplier(o * R._act16(lstm.tanh_cell, cn), *lstm.hidden_mult)
                     + lstm.hidden_zp, -128, 127)
    else:
        v = gates["o"] * np.tanh(cn * 2.0 ** cs) / _hidden_scale(lstm)
        hn = np.clip(_round(v) + lstm.hidden_zp, -128, 127).astype(np.int64)
    return hn, cn


def snapped(lstm, x, h, c):
    """Float arithmetic with every intermediate snapped to LiteRT's grid by float rounding: the gate
    pre-activations on Q3.12 (input and recurrent parts rounded separately, as LiteRT adds them), the
    gates and tanh(c) on Q0.15, c on its int16 grid, h on its int8 grid."""
    q = {}
    for g in lstm.gates:
        accx = wrap32(x @ lstm.w_x[g] + lstm.bx[g])
        acch = wrap32(h @ lstm.w_h[g] + lstm.bh[g])
        z = np.clip(_round(accx * _real(lstm.mx[g])) + np.clip(_round(acch * _real(lstm.mh[g])), -32768, 32767),
                    -32768, 32767)
        a = np.tanh(z / 4096) if g == "c" else _sigmoid(z / 4096)
        q[g] = np.clip(_round(a * 32768), -32768, 32767) / 32768
    cs = lstm.cell_scale
    cn = np.clip(_round((q["f"] * c * 2.0 ** cs + q["i"] * q["c"]) / 2.0 ** cs), -32768, 32767).astype(np.int64)
    t = np.clip(_round(np.tanh(cn * 2.0 ** cs) * 32768), -32768, 32767) / 32768
    hn = np.clip(_round(q["o"] * t / _hidden_scale(lstm)) + lstm.hidden_zp, -128, 127).astype(np.int64)
    return hn, cn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", type=int, default=12, help="seeds (each in both time orders, 2 invokes)")
    args = ap.parse_args()
    records: list[Record] = []
    step = R._IntegerLstm.step

    def recording(self, x, h, c):
        hn, cn = step(self, x, h, c)
        records.append((self, x.copy(), h.copy(), c.copy(), hn.copy(), cn.copy()))
        return hn, cn

    R._IntegerLstm.step = recording
    try:
        for seed in range(args.models):
            for time_major in (True, False):
                model, x = integer_lstm_model(seed, time_major=time_major, steps=6, n_batch=1 + seed % 3,
                                              n_cell=8 + seed)
                for k in range(2):
                    run_litegpu(model, [np.roll(x, k, axis=-1)])
    finally:
        R._IntegerLstm.step = step
    total = sum(r[4].size for r in records)
    print(f"{len(records)} steps, {total} hidden values, each one step from LiteRT's exact state")
    rows = [("float view (h, c snapped)", lambda *a: staged(*a, False, False, False, False)),
            ("+ gate pre-activations by LiteRT's MBQM (Q3.12)", lambda *a: staged(*a, True, False, False, False)),
            ("+ gates by LiteRT's int16 sigmoid/tanh tables", lambda *a: staged(*a, True, True, False, False)),
            ("+ cell update by LiteRT's rounding shifts", lambda *a: staged(*a, True, True, True, False)),
            ("+ h by LiteRT's tanh table and MBQM (all exact)", lambda *a: staged(*a, True, True, True, True)),
            ("every intermediate snapped by float rounding", snapped)]
    for name, fn in rows:
        dh = dc = 0
        for lstm, x, h, c, hn, cn in records:
            a, b = fn(lstm, x, h, c)
            dh += int((a != hn).sum())
            dc += int((b != cn).sum())
        print(f"{name:50s} h' differs {dh:5d} ({dh / total:6.2%}); c' differs {dc:5d} ({dc / total:6.2%})")


if __name__ == "__main__":
    main()
