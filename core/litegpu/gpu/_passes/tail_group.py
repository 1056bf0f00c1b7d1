"""Tail groups: a launch of one work group (``se_gate`` of one batch item: one group pools a map and runs two tiny
layers) that follows a launch K in the plan's order becomes part of K's launch, run by whichever of K's work
groups finishes last (kernel option ``tail``, rendered by the dialect: ``_dialects/opencl``).

One launch fewer: on NVIDIA's OpenCL, which has no command buffers, every launch costs the host ~7-9 us of driver
submission however early it is enqueued (docs/performance.md), and the GPU a few us between launches.  The tail
needs nothing K's launch does not have ready (it is the next launch: whatever it reads is written by K or
before), and runs on a group of K's size: the kernel says how to run at another group size (its spec's
``regroup``; se_gate's segment sizes follow the group).  The dialect must be able to render it
(``Emitter.tail_group``: OpenCL; GLSL and WGSL plans keep the launch).

Where: after lowering and the twin merge, before the memory plan (so the tail's tensors and K's are live in the
same launch: the arena never places a tail's output over bytes K reads).  Which: with ``TAIL_GROUP = "cost"``, where
a launch costs the host something (``launch_host_us``: NVIDIA's OpenCL, no command buffers) and the cost model says
the one launch takes no more GPU time than the two and less of an invoke (``in_invoke``); with
"on" wherever it can (tests force it on PoCL); "off" never ("cost" is the default, ``TAIL_GROUP``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._cost import DeviceCost, estimate, in_invoke, launch_work
from .._graph import GpuOp, Report
from .._kernel_specs import TAIL_PREFIX, TAIL_TICKET
from .._tuning import candidates
from ..kernels import render

__all__ = ["fuse_tail_groups", "TAIL_GROUP", "TAIL_MODES"]

TAIL_MODES = ("cost", "on", "off")

#: A/B switch (``--set "litegpu.gpu._passes.tail_group.TAIL_GROUP='off'"``): "cost" fuses where the cost model says
#: the launch saved pays, "on" wherever the kernels and the dialect can (tests on PoCL), "off" never.  "cost" by
#: default: with the rule that keeps only the tails that save GPU time (six in selfie_segmentation) and the
#: device-scope fence on NVIDIA, selfie host to host 0.685 -> 0.643 and 0.656 -> 0.611 ms, device-bound 0.332 ->
#: 0.317 and 0.490 -> 0.424, in two processes with the roles swapped (H100, _dev/extra14.sh, docs/performance.md,
#: tenth session); the first form (nine tails, a CTA-scope fence) had measured no steady gain (s14-tail-1/2)
TAIL_GROUP = "cost"

#: the local memory the launch's groups may hold, the producer's and the tail's arrays together (bytes): OpenCL 1.2's
#: least ``CL_DEVICE_LOCAL_MEM_SIZE`` (the only dialect that renders tail groups today)
LOCAL_MEMORY_FLOOR = 32768


def _spec(kernel: str) -> Any:
    from ..ops import SPECS

    return SPECS[kernel]


def _tail_form(t: GpuOp, threads: int) -> tuple[dict[str, Any], dict[str, Any]] | str:
    """Launch ``t``'s options and params as a tail of a launch with groups of ``threads``, or why it cannot be."""
    spec = _spec(t.kernel)
    opts = spec.resolve(t.options)
    if spec.regroup is not None:
        got = spec.regroup(t.options, t.params, threads)
        if got is None:
            return f"{t.kernel} takes no group of {threads}"
        opts, params = got
    else:
        params = dict(t.params)
    if spec.fixed_workgroup(spec.resolve(opts)) != (threads, 1, 1):
        return f"{t.kernel}'s group is not {threads} threads along x"
    if render(t.kernel, "opencl", "fp32", **opts).num_workgroups(params) != (1, 1, 1):
        return f"{t.kernel} is more than one group"
    return dict(opts), dict(params)


def _one_group(t: GpuOp) -> bool:
    """Whether launch ``t`` is one work group (of a group size baked into its kernel): a tail candidate."""
    spec = _spec(t.kernel)
    if spec.shared_wg is None or int(t.options.get("branches", 1)) > 1:
        return False
    return render(t.kernel, "opencl", "fp32", **t.options).num_workgroups(t.params) == (1, 1, 1)


def _price(op: GpuOp, dev: DeviceCost) -> float | None:
    w = launch_work(op.kernel, op.options, op.params)
    return None if w is None else estimate(w, dev)


def _fuse(k: GpuOp, t: GpuOp, dev: DeviceCost | None, info: Any, precision: str, mode: str) -> GpuOp | str:
    """K and its tail T as one launch, or why not."""
    if precision != "fp32" or k.precision or t.precision or k.buffer_storage or t.buffer_storage:
        # (a storage-only half buffer is read with vload_half, which takes no volatile pointer)
        return "not fp32"
    if k.options.get("tail") or t.options.get("tail") or int(t.options.get("branches", 1)) > 1:
        return "a tail or branched launch already"
    if not k.bindings or not t.bindings:
        return "no bindings"
    kspec = _spec(k.kernel)
    wg = kspec.fixed_workgroup(kspec.resolve(k.options))
    if wg is None:  # the group the runtime's heuristic would give it (_tuning.candidates), now fixed
        if info is None:
            return f"{k.kernel}'s group is chosen at prepare (no device to choose it for)"
        wg = candidates(k.kernel, render(k.kernel, "opencl", "fp32", **k.options).global_size(k.params), info,
                        "none")[0]
    if set(t.outputs) & (set(k.inputs) | set(k.outputs)):
        return "the tail writes what the launch reads or writes"
    form = _tail_form(t, math.prod(wg))
    if isinstance(form, str):
        return form
    opts, params = form
    shared = render(k.kernel, "opencl", "fp32", **k.options).shared_bytes + render(t.kernel, "opencl", "fp32",
                                                                                  **opts).shared_bytes
    if shared > LOCAL_MEMORY_FLOOR:
        return f"{shared} bytes of local memory a group"
    if mode == "cost":
        if dev is None:
            return "no device cost"
        if dev.launch_host_us <= 0:
            # the API replays a partition's launches as one submission (PoCL's command buffers) or was not measured:
            # a tail saves a fraction of a microsecond there, and its barriers under the last group's branch cost
            # PoCL a build several times longer (selfie_segmentation cold 10.7 s -> 35 s on the CI machine)
            return "a launch costs the host nothing to save here"
        ek, et = _price(k, dev), _price(t, dev)
        t2 = GpuOp(kernel=t.kernel, params=params, inputs=t.inputs, outputs=t.outputs, options=opts)
        et2 = _price(t2, dev)
        if ek is None or et is None or et2 is None:
            return "not priced"
        # one launch: K, then the tail's body in one of K's groups (its own launch's fixed cost saved).  It must
        # cost no more GPU time than the two launches and less of an invoke: ``in_invoke`` prices each launch at
        # least the host's enqueue, true where the host is the bottleneck, but where the GPU is (selfie_segmentation
        # on an H100, 0.38 ms of kernels against 0.27 of enqueues) a tail that takes the GPU longer than its own
        # launch did costs the invoke that time.  Measured (s14-tail-1/2, OpenCL events): the six se_gates after
        # pw_dw_conv2d, regrouped 512 -> 256 threads (est. +0.6 to +1.2 us, less the launch's 3.5), took 1.0 to 5.5 us
        # less as tails; the three regrouped to 32 or 64 threads (est. +4.3 to +8.4) took 2.8 to 8.3 us more
        gpu = ek + et2 - dev.launch_us
        if gpu > ek + et:
            return f"more GPU time ({gpu:.1f} us against {ek + et:.1f})"
        fused = in_invoke(gpu, dev)
        if fused >= in_invoke(ek, dev) + in_invoke(et, dev):
            return f"costs more ({fused:.1f} us against {in_invoke(ek, dev) + in_invoke(et, dev):.1f})"
    written = set(k.outputs)
    fresh = tuple(n for n, src in t.bindings if isinstance(src, int) and src in written)
    consts = {TAIL_PREFIX + n: a for n, a in t.constants.items()}
    # the ticket counter: zero as uploaded with the constants at prepare, and zero again after every launch (the
    # last group sets it back).  A launch either runs all its groups or fails the context (a device error loses the
    # partition's memory with it, and a new prepare uploads a zeroed counter), so no invoke leaves it non-zero
    consts[TAIL_TICKET] = np.zeros(1, np.int32)
    return GpuOp(kernel=k.kernel, params={**k.params, **{TAIL_PREFIX + n: v for n, v in params.items()}},
                 inputs=list(dict.fromkeys([*k.inputs, *t.inputs])), outputs=[*k.outputs, *t.outputs],
                 constants={**k.constants, **consts}, node=k.node, origin=(*k.origin, *t.origin),
                 accumulator=k.accumulator,
                 options={**k.options, "tail": {"kernel": t.kernel, "options": opts, "fresh": fresh,
                                                "group": tuple(int(x) for x in wg)}},
                 bindings=[*k.bindings, *((TAIL_PREFIX + n, TAIL_PREFIX + s if isinstance(s, str) else s)
                                          for n, s in t.bindings), (TAIL_TICKET, TAIL_TICKET)],
                 precision=k.precision, buffer_storage=dict(k.buffer_storage))


def fuse_tail_groups(ops: Sequence[GpuOp], dev: DeviceCost | None, dialect: str, precision: str, info: Any = None
                     ) -> tuple[list[GpuOp], Report]:
    """``ops`` with every one-group launch that can run as the tail of the launch before it fused into it (see the
    module doc); ``dialect``: the plan's kernel dialect ("" where unknown: nothing fuses); ``info``: the device's
    ``DeviceInfo`` (the work group of a launch whose kernel does not fix one is chosen for it here)."""
    if TAIL_GROUP not in TAIL_MODES:
        from ..._errors import ConfigError

        raise ConfigError(f"litegpu.gpu._passes.tail_group.TAIL_GROUP is {TAIL_GROUP!r}; set it to one of "
                          f"{', '.join(TAIL_MODES)}")
    if TAIL_GROUP == "off":
        return list(ops), ["off (TAIL_GROUP = 'off')"]
    from .._dialects import EMITTERS

    if dialect not in EMITTERS or not EMITTERS[dialect].tail_group:
        return list(ops), [f"the {dialect or 'unknown'} dialect renders no tail group"]
    out: list[GpuOp] = []
    lines: Report = []
    i = 0
    while i < len(ops):
        k = ops[i]
        if i + 1 < len(ops) and _one_group(ops[i + 1]):
            got = _fuse(k, ops[i + 1], dev, info, precision, TAIL_GROUP)
            if isinstance(got, GpuOp):
                out.append(got)
                lines.append(f"{ops[i + 1].kernel} runs in the last group of {k.kernel}")
                i += 2
                continue
            lines.append(f"{ops[i + 1].kernel} after {k.kernel} keeps its launch: {got}")
        out.append(k)
        i += 1
    fused = len(ops) - len(out)
    return out, [f"{fused} launch(es) run as tail groups", *lines]
