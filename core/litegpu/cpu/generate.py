"""Kernels that make new tensors from shapes or scalars: SHAPE, FILL, ZEROS_LIKE, RANGE.

FILL's and RANGE's output shapes depend on input values, so they are dynamic
unless those inputs are constant (then the whole output is computed at prepare).
"""

from __future__ import annotations

import numpy as np

from ._registry import NodeContext, Prepared, register_kernel
from ._shapes import const_ints, int_values

__all__: list[str] = []


@register_kernel("SHAPE", versions=range(1, 2))
def _shape(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    odt = np.dtype(ctx.outputs[0].dtype)
    if odt not in (np.int32, np.int64):
        raise ctx.fail(f"out_type must be int32 or int64, got {odt}")
    x = ctx.inputs[0]
    out_shape = None if x.shape is None else (len(x.shape),)
    return Prepared([out_shape], lambda inputs: [np.asarray(inputs[0].shape, dtype=odt).reshape(-1)])


@register_kernel("FILL", versions=range(1, 6))
def _fill(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 2 inputs (dims, value) and 1 output")
    dims, value = ctx.inputs
    if dims.dtype not in ("int32", "int64"):
        raise ctx.fail(f"dims must be int32 or int64, got {dims.dtype}")
    if value.shape is not None and len(value.shape) != 0 and int(np.prod(value.shape)) != 1:
        raise ctx.fail(f"value must be a scalar, got shape {tuple(value.shape)}")
    if ctx.outputs[0].dtype != value.dtype:
        raise ctx.fail(f"output dtype {ctx.outputs[0].dtype} differs from value dtype {value.dtype}")
    odt = np.dtype(object) if value.dtype == "string" else np.dtype(value.dtype)

    def target(vals) -> tuple[int, ...]:
        shape = tuple(int(v) for v in np.asarray(vals).reshape(-1))
        if any(d < 0 for d in shape):
            raise ctx.fail(f"dims {shape} must be non-negative")
        return shape

    dv = const_ints(dims)
    if dv is not None:
        shape = target(dv)
        return Prepared([shape], lambda inputs: [np.full(shape, np.asarray(inputs[1]).reshape(-1)[0], odt)])

    def run_dynamic(inputs):
        shape = target(int_values(ctx, inputs[0], "dims"))
        return [np.full(shape, np.asarray(inputs[1]).reshape(-1)[0], odt)]

    return Prepared([None], run_dynamic)


@register_kernel("ZEROS_LIKE", versions=range(1, 2))
def _zeros_like(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.fail("expects 1 input and 1 output")
    x = ctx.inputs[0]
    odt = np.dtype(ctx.outputs[0].dtype)
    shape = None if x.shape is None else tuple(x.shape)
    return Prepared([shape], lambda inputs: [np.zeros(inputs[0].shape, odt)])


@register_kernel("RANGE", dtypes=("int32", "int64", "float32"), versions=range(1, 3))
def _range(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or None in ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.fail("expects 3 inputs (start, limit, delta) and 1 output")
    dts = {t.dtype for t in ctx.inputs}
    if len(dts) != 1:
        raise ctx.fail(f"start, limit and delta must share a dtype, got {sorted(dts)}")
    odt = np.dtype(ctx.outputs[0].dtype)
    is_float = odt.kind == "f"

    def compute(start, limit, delta) -> np.ndarray:
        start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        if delta == 0:
            raise ctx.fail("delta must not be zero")
        if (start > limit and delta > 0) or (start < limit and delta < 0):
            raise ctx.fail(f"range from {start} to {limit} never ends with delta {delta}")
        if is_float:
            s, l_, d = np.float32(start), np.float32(limit), np.float32(delta)
            n = int(np.ceil(np.abs((l_ - s) / d)))
            if n == 0:
                return np.zeros((0,), odt)
            # LiteRT adds delta repeatedly in float32; cumsum rounds the same way
            steps = np.full(n, d, np.float32)
            steps[0] = s
            return np.cumsum(steps, dtype=np.float32)
        s, l_, d = int(start), int(limit), int(delta)
        n = (abs(l_ - s) + abs(d) - 1) // abs(d)
        return (s + d * np.arange(n, dtype=np.int64)).astype(odt)

    if all(t.data is not None for t in ctx.inputs):
        value = compute(*(t.data for t in ctx.inputs))
        return Prepared([value.shape], lambda inputs: [value.copy()])
    return Prepared([None], lambda inputs: [compute(*inputs)])


# ---- STABLEHLO_RNG_BIT_GENERATOR ------------------------------------------------------------------
# LiteRT's kernel: the uint64 state holds the key (state[0]) and a 64-bit counter (state[1]); each
# block of the counter gives 2 (THREEFRY, Threefry-2x32 with 20 rounds) or 4 (PHILOX / DEFAULT,
# Philox-4x32 with 10 rounds; a third state word supplies the counter's upper half) 32-bit
# values, written in order; the output state is the key and the counter after the last block.

_U32 = np.uint32


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def _threefry2x32(k0: int, k1: int, c0: np.ndarray, c1: np.ndarray) -> list[np.ndarray]:
    k = [_U32(k0), _U32(k1), _U32(k0 ^ k1 ^ 0x1BD11BDA)]
    x0, x1 = c0 + k[0], c1 + k[1]
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    for i, (r, a, b) in enumerate(((0, 1, 2), (1, 2, 0), (0, 0, 1), (1, 1, 2), (0, 2, 0))):
        for rot in rotations[r]:
            x0 = x0 + x1
            x1 = _rotl(x1, rot) ^ x0
        x0 = x0 + k[a]
        x1 = x1 + k[b] + _U32(i + 1)
    return [x0, x1]


def _philox4x32(k0: int, k1: int, c: list[np.ndarray]) -> list[np.ndarray]:
    for _ in range(10):
        key0, key1 = _U32(k0), _U32(k1)
        p0 = np.uint64(0xD2511F53) * c[0].astype(np.uint64)
        p1 = np.uint64(0xCD9E8D57) * c[2].astype(np.uint64)
        hi0, lo0 = (p0 >> np.uint64(32)).astype(_U32), p0.astype(_U32)
        hi1, lo1 = (p1 >> np.uint64(32)).astype(_U32), p1.astype(_U32)
        c = [hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0]
        k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF  # Python ints: no numpy overflow warning
    return c


@register_kernel("STABLEHLO_RNG_BIT_GENERATOR", dtypes=("uint64",), versions=range(1, 2))
def stablehlo_rng_bit_generator(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 2:
        raise ctx.fail("expects the initial state and gives the new state and the random bits")
    algorithm = int(ctx.options.get("algorithm", 0) or 0)
    out = ctx.outputs[1]
    if out.dtype not in ("int32", "uint32", "int64", "uint64") or out.shape is None:
        raise ctx.fail(f"the output must be a static int32/uint32/int64/uint64 tensor, got {out.dtype} {out.shape}")
    if algorithm not in (0, 1, 2):
        raise ctx.fail(f"unknown RNG algorithm {algorithm}")
    oshape = tuple(int(d) for d in out.shape)
    words = int(np.prod(oshape)) * (2 if out.dtype in ("int64", "uint64") else 1)
    state_shape = None if ctx.inputs[0].shape is None else tuple(ctx.inputs[0].shape)

    def run(inputs):
        state = np.ascontiguousarray(inputs[0], np.uint64)
        n = state.shape[0] if state.ndim == 1 else -1
        if algorithm == 2 and n != 2 or algorithm != 2 and n not in (2, 3):
            raise ctx.fail(f"a state of shape {state.shape} for RNG algorithm {algorithm}")
        s = state.view(_U32)
        per = 2 if algorithm == 2 else 4
        blocks = -(-words // per)
        start = int(s[2]) | (int(s[3]) << 32)
        count = (np.uint64(start) + np.arange(blocks, dtype=np.uint64))  # wraps like the C++ carry
        c0, c1 = count.astype(_U32), (count >> np.uint64(32)).astype(_U32)
        if algorithm == 2:
            vals = _threefry2x32(int(s[0]), int(s[1]), c0, c1)
        else:
            hi = (s[4], s[5]) if n == 3 else (s[0], s[1])
            vals = _philox4x32(int(s[0]), int(s[1]), [c0, c1, np.full(blocks, hi[0], _U32),
                                                       np.full(blocks, hi[1], _U32)])
        bits = np.stack(vals, axis=1).reshape(-1)[:words]
        new_state = state.copy()
        end = (start + blocks) % (1 << 64)
        ns = new_state.view(_U32)
        ns[0], ns[1], ns[2], ns[3] = s[0], s[1], end & 0xFFFFFFFF, end >> 32
        return [new_state, bits.view(np.dtype(out.dtype)).reshape(oshape).copy()]

    return Prepared([state_shape, oshape], run)


# ---- RANDOM_UNIFORM / RANDOM_STANDARD_NORMAL ------------------------------------------------------
# LiteRT draws from TensorFlow's Philox-4x32 stream: key = the 64-bit ``seed``, the counter's upper
# half = ``seed2``, its lower half counting the 4-value blocks from 0 at prepare and on across
# invokes.  Uniform floats take each value's low 23 bits as the mantissa of a number in [1, 2)
# minus 1; normals come from pairs through Box-Muller (float32 log, sqrt, sin, cos; within an ulp
# or two of glibc's).  With seed = seed2 = 0 LiteRT seeds from /dev/urandom, and so does this.


class _PhiloxStream:
    def __init__(self, seed: int, seed2: int):
        # LiteRT keeps the schema's 64-bit seeds in 32-bit ints (measured: only the low 32 bits count,
        # sign-extended)
        seed, seed2 = (((v & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000 for v in (seed, seed2))
        if seed == 0 and seed2 == 0:
            seed, seed2 = (int(v) for v in np.random.default_rng().integers(0, 2**63, 2))
        self.key = (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)
        self.hi = (seed2 & 0xFFFFFFFF, (seed2 >> 32) & 0xFFFFFFFF)
        self.count = 0

    def blocks(self, n: int) -> np.ndarray:
        """The next ``n`` blocks of 4 uint32 values, shape (n, 4)."""
        count = np.uint64(self.count) + np.arange(n, dtype=np.uint64)
        self.count += n
        c = [count.astype(_U32), (count >> np.uint64(32)).astype(_U32),
             np.full(n, self.hi[0], _U32), np.full(n, self.hi[1], _U32)]
        return np.stack(_philox4x32(self.key[0], self.key[1], c), axis=1)


def _uint32_to_float(x: np.ndarray) -> np.ndarray:
    return ((x & _U32(0x7FFFFF)) | _U32(127 << 23)).view(np.float32) - np.float32(1)


def _random(ctx: NodeContext, normal: bool) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or ctx.inputs[0].dtype != "int32" or len(ctx.outputs) != 1:
        raise ctx.fail("expects one int32 shape input and one output")
    if ctx.outputs[0].dtype != "float32":
        raise ctx.fail(f"the output must be float32 (LiteRT's only type), got {ctx.outputs[0].dtype}")
    stream = _PhiloxStream(int(ctx.options.get("seed", 0) or 0), int(ctx.options.get("seed2", 0) or 0))
    shape_c = const_ints(ctx.inputs[0])

    def run(inputs):
        shape = tuple(int(d) for d in int_values(ctx, inputs[0], "shape"))
        if any(d < 0 for d in shape):
            raise ctx.fail(f"negative dimension in shape {shape}")
        n = int(np.prod(shape))
        vals = stream.blocks(-(-n // 4)).reshape(-1)
        if not normal:
            return [_uint32_to_float(vals[:n]).reshape(shape)]
        u1 = np.maximum(_uint32_to_float(vals[0::2]), np.float32(1e-7))
        v1 = (2.0 * np.pi * _uint32_to_float(vals[1::2]).astype(np.float64)).astype(np.float32)
        u2 = np.sqrt(np.float32(-2) * np.log(u1))
        out = np.empty(vals.size, np.float32)
        out[0::2], out[1::2] = np.sin(v1) * u2, np.cos(v1) * u2
        return [out[:n].reshape(shape)]

    static = None if shape_c is None else tuple(int(d) for d in shape_c)
    return Prepared([static], run)


@register_kernel("RANDOM_UNIFORM", dtypes=("int32",), versions=range(1, 2))
def random_uniform(ctx: NodeContext) -> Prepared:
    return _random(ctx, normal=False)


@register_kernel("RANDOM_STANDARD_NORMAL", dtypes=("int32",), versions=range(1, 2))
def random_standard_normal(ctx: NodeContext) -> Prepared:
    return _random(ctx, normal=True)


@register_kernel("MULTINOMIAL", dtypes=("float32",), versions=range(1, 2))
def multinomial(ctx: NodeContext) -> Prepared:
    """LiteRT's MULTINOMIAL: samples come from a copy of the stream (which itself jumps ahead by
    ``batch * ceil4(num_samples) * 512`` blocks per invoke), two values per sample made into a double
    in [0, 1) and scaled by the row's total ``exp(logit - max)`` (non-finite logits weigh 0); the
    sample is the first class whose running total exceeds it."""
    if len(ctx.inputs) != 2 or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.fail("expects logits and num_samples")
    if ctx.inputs[1].dtype != "int32" or ctx.outputs[0].dtype not in ("int32", "int64"):
        raise ctx.fail("num_samples must be int32 and the output int32 or int64")
    stream = _PhiloxStream(int(ctx.options.get("seed", 0) or 0), int(ctx.options.get("seed2", 0) or 0))
    out_dtype = np.dtype(ctx.outputs[0].dtype)

    def run(inputs):
        logits = np.asarray(inputs[0], np.float32)
        ns = np.asarray(inputs[1])
        if logits.ndim != 2 or logits.shape[1] < 1 or ns.ndim != 0 or int(ns) < 0:
            raise ctx.fail(f"logits {logits.shape} must be (batch, classes >= 1), num_samples a scalar >= 0")
        batch, n = logits.shape[0], int(ns)
        start = stream.count
        stream.count += batch * ((n + 3) // 4 * 4) * 2 * 256
        total_vals = batch * n * 2
        copy = _PhiloxStream.__new__(_PhiloxStream)
        copy.key, copy.hi, copy.count = stream.key, stream.hi, start
        vals = copy.blocks(-(-total_vals // 4)).reshape(-1)[:total_vals].astype(np.uint64)
        hi, lo = vals[0::2] & np.uint64(0xFFFFF), vals[1::2]
        u = ((np.uint64(1023) << np.uint64(52)) | (hi << np.uint64(32)) | lo).view(np.float64) - 1.0
        out = np.empty((batch, n), out_dtype)
        for r in range(batch):
            row = logits[r]
            finite = np.isfinite(row)
            mx = np.float64(row[finite].max()) if finite.any() else np.float64(np.finfo(np.float32).min)
            w = np.where(finite, np.exp(row.astype(np.float64) - mx), 0.0)
            cdf = np.cumsum(w)
            out[r] = np.searchsorted(cdf, u[r * n:(r + 1) * n] * cdf[-1], side="right")
        return [out]

    static = None
    if ctx.inputs[0].shape is not None and ctx.inputs[1].data is not None:
        static = (int(ctx.inputs[0].shape[0]), int(np.asarray(ctx.inputs[1].data)))
    return Prepared([static], run)
