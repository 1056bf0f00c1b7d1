"""Control flow and resource state: WHILE, IF, CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE.

These kernels use the interpreter through :class:`NodeContext`:
``call_subgraph(index, arrays)`` runs another subgraph, ``subgraph_io(index)``
describes its inputs/outputs, and ``resources`` is the per-interpreter dict
shared by all subgraphs.  Keys this module uses in ``resources``:

* ``RESOURCE_IDS`` -> ``{(container, shared_name): int}``: resource ids handed out by
  VAR_HANDLE in order of first use (LiteRT's ``resource_ids`` map; other
  resource ops such as hash tables may share it);
* ``("variable", id)`` -> the array held by a resource variable;
* ``("call_once", subgraph_index)`` -> True once that init subgraph has run.

LiteRT's ``reset_all_variables`` resets *variable tensors* only; resource
variables and CALL_ONCE's "already initialized" flags survive it (the tests
check this against LiteRT), so nothing here registers a reset hook.
"""

from __future__ import annotations

import numpy as np

from .._errors import LiteGPUError
from ._registry import NodeContext, Prepared, TensorSpec, register_kernel

__all__ = ["RESOURCE_IDS", "resource_id", "variable_key"]

RESOURCE_IDS = "resource_ids"


def variable_key(rid: int) -> tuple[str, int]:
    return ("variable", int(rid))


def resource_id(resources: dict, container: str, shared_name: str) -> int:
    """LiteRT's rule: the next free id the first time a (container, shared_name) pair is seen."""
    ids = resources.setdefault(RESOURCE_IDS, {})
    return ids.setdefault((container, shared_name), len(ids))


def _need_interpreter(ctx: NodeContext, subgraph_io: bool = True) -> None:
    if ctx.call_subgraph is None or (subgraph_io and ctx.subgraph_io is None):
        raise ctx.fail("needs an interpreter that can call subgraphs")


def _io(ctx: NodeContext, index: int) -> tuple[list[TensorSpec], list[TensorSpec]]:
    try:
        return ctx.subgraph_io(index)  # type: ignore[misc]
    except (IndexError, KeyError):
        raise ctx.invalid(f"subgraph {index} does not exist") from None


def _subgraph_index(ctx: NodeContext, key: str) -> int:
    if key not in ctx.options:
        raise ctx.invalid(f"option {key} is missing")
    return int(ctx.options[key])


def _shapes(specs) -> list[tuple[int, ...] | None]:
    return [None if s is None or s.shape is None else tuple(int(d) for d in s.shape) for s in specs]


def _scalar_bool(v: np.ndarray, what: str) -> bool:
    a = np.asarray(v)
    if a.size != 1:
        raise LiteGPUError(f"{what} must have exactly one element, got shape {a.shape}")
    return bool(a.reshape(-1)[0])


@register_kernel("WHILE", versions=range(1, 2))
def while_op(ctx: NodeContext) -> Prepared:
    _need_interpreter(ctx)
    cond, body = _subgraph_index(ctx, "cond_subgraph_index"), _subgraph_index(ctx, "body_subgraph_index")
    n = len(ctx.inputs)
    if len(ctx.outputs) != n or any(t is None for t in ctx.inputs):
        raise ctx.invalid(f"needs as many outputs as inputs ({n}), all present")
    c_in, c_out = _io(ctx, cond)
    b_in, b_out = _io(ctx, body)
    if len(c_in) != n or len(c_out) != 1:
        raise ctx.invalid(f"cond subgraph {cond} must take {n} inputs and give 1 "
                          f"output (has {len(c_in)} -> {len(c_out)})")
    if c_out[0].dtype != "bool":
        raise ctx.invalid(f"cond subgraph output must be bool, got {c_out[0].dtype}")
    if len(b_in) != n or len(b_out) != n:
        raise ctx.invalid(f"body subgraph {body} must take and give {n} tensors "
                          f"(has {len(b_in)} -> {len(b_out)})")
    in_shapes = _shapes(ctx.inputs)
    body_shapes = _shapes(b_out)
    # Loop variables keep their shapes when the body's outputs match its inputs; otherwise dynamic.
    out_shapes = [s if s is not None and s == bs else None for s, bs in zip(in_shapes, body_shapes, strict=True)]
    call = ctx.call_subgraph

    def run(inputs):
        vals = list(inputs)
        while _scalar_bool(call(cond, vals)[0], "WHILE condition"):
            vals = list(call(body, vals))
            if len(vals) != n:
                raise LiteGPUError(f"WHILE body returned {len(vals)} values, expected {n}")
        return [np.array(v, copy=True) for v in vals]

    return Prepared(out_shapes, run)


@register_kernel("IF", versions=range(1, 2))
def if_op(ctx: NodeContext) -> Prepared:
    _need_interpreter(ctx)
    then_i, else_i = _subgraph_index(ctx, "then_subgraph_index"), _subgraph_index(ctx, "else_subgraph_index")
    if not ctx.inputs or ctx.inputs[0] is None:
        raise ctx.invalid("needs a condition input")
    cond = ctx.inputs[0]
    if cond.dtype != "bool":
        raise ctx.invalid(f"condition must be bool, got {cond.dtype}")
    if cond.shape is not None and int(np.prod(cond.shape)) != 1:
        raise ctx.invalid(f"condition must have one element, got shape {cond.shape}")
    n_in, n_out = len(ctx.inputs) - 1, len(ctx.outputs)
    branch_shapes = []
    for idx in (then_i, else_i):
        b_in, b_out = _io(ctx, idx)
        if len(b_in) != n_in or len(b_out) != n_out:
            raise ctx.invalid(f"branch subgraph {idx} must take {n_in} and give {n_out} "
                              f"tensors (has {len(b_in)} -> {len(b_out)})")
        branch_shapes.append(_shapes(b_out))
    out_shapes = [a if a is not None and a == b else None for a, b in zip(*branch_shapes, strict=True)]
    call = ctx.call_subgraph

    def run(inputs):
        idx = then_i if _scalar_bool(inputs[0], "IF condition") else else_i
        outs = call(idx, list(inputs[1:]))
        return [np.array(v, copy=True) for v in outs]

    return Prepared(out_shapes, run)


@register_kernel("CALL_ONCE", versions=range(1, 2))
def call_once(ctx: NodeContext) -> Prepared:
    _need_interpreter(ctx, subgraph_io=False)
    init = _subgraph_index(ctx, "init_subgraph_index")
    if ctx.inputs or ctx.outputs:
        raise ctx.invalid("takes no inputs and gives no outputs")
    if ctx.subgraph_io is not None:
        i_in, i_out = _io(ctx, init)
        if i_in or i_out:
            raise ctx.invalid(f"init subgraph {init} must have no inputs/outputs")
    resources, call = ctx.resources, ctx.call_subgraph
    key = ("call_once", init)

    def run(inputs):
        if not resources.get(key):
            call(init, [])
            resources[key] = True
        return []

    return Prepared([], run)


@register_kernel("VAR_HANDLE", versions=range(1, 2))
def var_handle(ctx: NodeContext) -> Prepared:
    if len(ctx.outputs) != 1:
        raise ctx.invalid("gives exactly one output")
    container = str(ctx.options.get("container", "") or "")
    shared_name = str(ctx.options.get("shared_name", "") or "")
    out = ctx.outputs[0]
    shape = tuple(int(d) for d in out.shape) if out.shape is not None else ()
    if int(np.prod(shape, dtype=np.int64)) != 1:
        shape = (1,)
    resources = ctx.resources

    def run(inputs):
        return [np.full(shape, resource_id(resources, container, shared_name), np.int32)]

    return Prepared([shape], run)


def _handle_id(h: np.ndarray) -> int:
    a = np.asarray(h)
    if a.size < 1:
        raise LiteGPUError("resource handle tensor is empty")
    return int(a.reshape(-1)[0])


@register_kernel("READ_VARIABLE", versions=range(1, 2))
def read_variable(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.invalid("needs one handle input and one output")
    resources = ctx.resources
    want = ctx.outputs[0].dtype

    def run(inputs):
        rid = _handle_id(inputs[0])
        val = resources.get(variable_key(rid))
        if val is None:
            raise LiteGPUError(f"READ_VARIABLE: resource variable {rid} has not been assigned")
        if want not in ("resource", "variant", "string") and val.dtype != np.dtype(want):
            raise LiteGPUError(f"READ_VARIABLE: variable {rid} holds {val.dtype}, the output is {want}")
        return [val.copy()]

    return Prepared([None], run)


@register_kernel("ASSIGN_VARIABLE", versions=range(1, 2))
def assign_variable(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 2 or any(t is None for t in ctx.inputs):
        raise ctx.invalid("needs a handle and a value")
    resources = ctx.resources

    def run(inputs):
        resources[variable_key(_handle_id(inputs[0]))] = np.array(inputs[1], copy=True)
        return []

    return Prepared([], run)


@register_kernel("STABLEHLO_COMPOSITE", versions=range(1, 2))
def stablehlo_composite(ctx: NodeContext) -> Prepared:
    """A named composite op: runs its decomposition subgraph, as LiteRT's CPU does."""
    _need_interpreter(ctx)
    idx = _subgraph_index(ctx, "decomposition_subgraph_index")
    d_in, d_out = _io(ctx, idx)
    if len(d_in) != len(ctx.inputs) or len(d_out) != len(ctx.outputs):
        raise ctx.invalid(f"{ctx.options.get('name', '')!r}: decomposition "
                          f"subgraph {idx} takes {len(d_in)} and gives {len(d_out)} tensors, the node has "
                          f"{len(ctx.inputs)} and {len(ctx.outputs)}")
    call = ctx.call_subgraph

    def run(inputs):
        return [np.array(v, copy=True) for v in call(idx, list(inputs))]

    return Prepared(_shapes(d_out), run)


# ---- hash tables: HASHTABLE, HASHTABLE_IMPORT, HASHTABLE_FIND, HASHTABLE_SIZE ---------------------
# LiteRT's static hash tables: HASHTABLE names table ``table_id`` (its handle holds the id; the table
# is created on first use), the first HASHTABLE_IMPORT fills it (a repeated key keeps its first value;
# later imports do nothing), FIND maps keys to values or the default's first element, SIZE counts the
# entries.  Keys and values are int64 -> string or string -> int64, as in LiteRT.

_TABLE_TYPES = {("int64", "string"), ("string", "int64")}


def _table_key(rid: int) -> tuple[str, int]:
    return ("hashtable", int(rid))


def _strings_or_values(spec: TensorSpec, a: np.ndarray) -> np.ndarray:
    """A string constant arrives as its raw buffer: its strings; anything else as it is."""
    if spec.dtype == "string" and a.dtype == np.uint8:
        from .._reader import string_values

        return string_values(a)
    return np.asarray(a)


def _key_of(v) -> object:
    return bytes(v) if isinstance(v, (bytes, bytearray, np.bytes_)) else (v.encode() if isinstance(v, str) else int(v))


@register_kernel("HASHTABLE", versions=range(1, 2))
def hashtable(ctx: NodeContext) -> Prepared:
    from .._schema import tensor_type_name

    if ctx.inputs or len(ctx.outputs) != 1:
        raise ctx.invalid("takes no inputs and gives one handle")
    kd = tensor_type_name(int(ctx.options.get("key_dtype", 0) or 0))
    vd = tensor_type_name(int(ctx.options.get("value_dtype", 0) or 0))
    if (kd, vd) not in _TABLE_TYPES:
        raise ctx.fail(f"a {kd} -> {vd} table: LiteRT's tables map int64 -> string or string -> int64")
    rid = int(ctx.options.get("table_id", 0) or 0)
    resources = ctx.resources

    def run(inputs):
        resources.setdefault(_table_key(rid), {"types": (kd, vd), "map": None})
        return [np.array([rid], np.int32)]

    return Prepared([(1,)], run)


def _table(resources: dict, handle: np.ndarray, op: str) -> dict:
    rid = _handle_id(handle)
    t = resources.get(_table_key(rid))
    if t is None:
        raise LiteGPUError(f"{op}: hash table {rid} does not exist (no HASHTABLE op created it)")
    return t


@register_kernel("HASHTABLE_IMPORT", versions=range(1, 2))
def hashtable_import(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or any(t is None for t in ctx.inputs) or ctx.outputs:
        raise ctx.invalid("needs handle, keys and values, and no output")
    resources = ctx.resources

    def run(inputs):
        t = _table(resources, inputs[0], "HASHTABLE_IMPORT")
        keys = _strings_or_values(ctx.inputs[1], inputs[1]).reshape(-1)
        values = _strings_or_values(ctx.inputs[2], inputs[2]).reshape(-1)
        if keys.shape != values.shape:
            raise LiteGPUError(f"HASHTABLE_IMPORT: {keys.size} keys and {values.size} values")
        if t["map"] is None:
            m: dict = {}
            for k, v in zip(keys, values, strict=True):
                m.setdefault(_key_of(k), v)
            t["map"] = m
        return []

    return Prepared([], run)


@register_kernel("HASHTABLE_FIND", versions=range(1, 2))
def hashtable_find(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 3 or any(t is None for t in ctx.inputs) or len(ctx.outputs) != 1:
        raise ctx.invalid("needs handle, keys and default value")
    resources = ctx.resources
    out_dtype = ctx.outputs[0].dtype

    def run(inputs):
        t = _table(resources, inputs[0], "HASHTABLE_FIND")
        if t["map"] is None:
            raise LiteGPUError("HASHTABLE_FIND: the hash table must be initialized (HASHTABLE_IMPORT) first")
        keys = _strings_or_values(ctx.inputs[1], inputs[1])
        default = _strings_or_values(ctx.inputs[2], inputs[2]).reshape(-1)[0]
        m = t["map"]
        found = [m.get(_key_of(k), default) for k in keys.reshape(-1)]
        if out_dtype == "string":
            return [np.array([bytes(v) for v in found], dtype=object).reshape(keys.shape)]
        return [np.array(found, np.int64).reshape(keys.shape)]

    kshape = None if ctx.inputs[1].shape is None else tuple(ctx.inputs[1].shape)
    return Prepared([kshape], run)


@register_kernel("HASHTABLE_SIZE", versions=range(1, 2))
def hashtable_size(ctx: NodeContext) -> Prepared:
    if len(ctx.inputs) != 1 or ctx.inputs[0] is None or len(ctx.outputs) != 1:
        raise ctx.invalid("needs one handle and one output")
    resources = ctx.resources

    def run(inputs):
        m = _table(resources, inputs[0], "HASHTABLE_SIZE")["map"]
        return [np.array([0 if m is None else len(m)], np.int64)]

    return Prepared([(1,)], run)
