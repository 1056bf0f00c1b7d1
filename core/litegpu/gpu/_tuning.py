"""Work-group tuning: time a few local sizes per kernel launch at prepare and keep the fastest.

The ``tuning`` option of a GPU delegate picks the search:

``none``
    the heuristic of :func:`litegpu.gpu.kernels.default_workgroup`, nothing timed;
``fast``
    3-4 candidates around the heuristic (the heuristic aimed at 32, 64, 128 and 256 threads);
``exhaustive``
    every power-of-two shape up to the device's limits that does not overshoot the grid.

Kernels whose work group is fixed by their shared memory (``split > 1``) are not tuned.  A result
is keyed by ``(device name, driver version, kernel source hash, grid)`` -- the same kernel over the
same grid on the same driver is timed once per delegate, and :meth:`WorkgroupTuner.dump` /
:meth:`WorkgroupTuner.load` turn the results into JSON-able data the serialization cache can keep
between runs.  Timing uses the host clock around blocking launches (the in-order queue is drained
before and after), the minimum over a few repetitions, which is robust against a busy machine.
Tuning never changes what a work item computes, so the numbers are identical whatever it picks.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ConfigError
from .kernels import RenderedKernel, default_workgroup, kernel_spec

__all__ = ["TUNING_MODES", "TuningKey", "WorkgroupTuner", "candidates"]

log = logging.getLogger("litegpu")

TUNING_MODES = ("none", "fast", "exhaustive")

#: (device name, driver version, sha256 of the kernel source (first 16 hex digits), grid)
TuningKey = tuple[str, str, str, tuple[int, int, int]]

_FAST_TARGETS = (64, 32, 128, 256)
_REPEATS = {"fast": 3, "exhaustive": 3}


def _pow2_up(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def candidates(kernel: str, grid: tuple[int, int, int], info: Any, mode: str,
               limit: int | None = None) -> list[tuple[int, int, int]]:
    """Work-group sizes to try for ``kernel`` over ``grid`` on a device described by ``info``
    (a :class:`~litegpu.gpu._device.DeviceInfo`); the heuristic's choice comes first.

    ``limit`` caps the threads per group (a kernel's own limit, e.g. OpenCL's
    ``CL_KERNEL_WORK_GROUP_SIZE``, may be below the device's).
    """
    max_total = int(getattr(info, "max_workgroup_size", 256) or 256)
    if limit:
        max_total = min(max_total, int(limit))
    dims = tuple(getattr(info, "max_workgroup_dims", (256, 256, 64)) or (256, 256, 64))
    base = {"max_workgroup_size": max_total, "max_workgroup_dims": dims}
    out: list[tuple[int, int, int]] = []

    def add(wg: tuple[int, int, int]) -> None:
        wg = tuple(int(x) for x in wg)  # type: ignore[assignment]
        if wg not in out and math.prod(wg) <= max_total and all(w <= d for w, d in zip(wg, dims, strict=False)):
            out.append(wg)

    add(default_workgroup(kernel, grid, base))
    if mode == "none":
        return out[:1]
    if mode == "fast":
        for target in _FAST_TARGETS:
            add(default_workgroup(kernel, grid, {**base, "preferred_workgroup_size": target}))
        return out
    if mode != "exhaustive":
        raise ConfigError(f"tuning {mode!r} is not one of {', '.join(TUNING_MODES)}")
    # every power-of-two shape within the device limits whose axes do not overshoot the grid's
    caps = [min(int(d), _pow2_up(g)) for d, g in zip(dims, grid, strict=False)]
    axes = [[1 << k for k in range(c.bit_length()) if (1 << k) <= c] for c in caps]
    for wg in itertools.product(*axes):
        add(wg)  # type: ignore[arg-type]
    return out


def source_hash(source: str) -> str:
    import hashlib  # (here: a warm start tunes nothing and need not load OpenSSL, see cache._keys._sha256)

    return hashlib.sha256(source.encode()).hexdigest()[:16]


class WorkgroupTuner:
    """Tuning state of one delegate: the mode and the results found (or loaded) so far."""

    def __init__(self, mode: str = "none"):
        if mode not in TUNING_MODES:
            raise ConfigError(f"tuning {mode!r} is not one of {', '.join(TUNING_MODES)}")
        self.mode = mode
        self.results: dict[TuningKey, tuple[int, int, int]] = {}
        self.timed = 0  # launches measured (for reports and tests)

    def key(self, info: Any, source: str, grid: tuple[int, int, int]) -> TuningKey:
        return (str(info.name), str(info.driver_version), source_hash(source),
                tuple(int(g) for g in grid))  # type: ignore[return-value]

    def choose(self, kernel: str, options: Mapping[str, Any], probe: RenderedKernel, grid: tuple[int, int, int],
               info: Any, trial: Callable[[tuple[int, int, int]], Callable[[], None] | None],
               sync: Callable[[], None], limit: int | None = None) -> tuple[int, int, int]:
        """The work group to launch ``probe``'s kernel with over ``grid``.

        ``trial(wg)`` prepares a launch with that work group (render, compile, bind) and returns a
        function enqueueing it, or None when the device refuses the size; ``sync`` waits for the
        queue.  With tuning off, or a work group fixed by the kernel, nothing is timed.
        """
        spec = kernel_spec(kernel)
        fixed = spec.fixed_workgroup(spec.resolve(options))
        if fixed:
            return tuple(fixed)  # type: ignore[return-value]
        cands = candidates(kernel, grid, info, self.mode, limit)
        if self.mode == "none" or len(cands) == 1:
            return cands[0]
        key = self.key(info, probe.source, grid)
        hit = self.results.get(key)
        if hit is not None and self._fits(hit, info, limit):
            return hit
        best, best_t = cands[0], math.inf
        for wg in cands:
            try:
                run = trial(wg)
                if run is None:
                    continue
                run()  # warm-up (first launch of a program can include lazy compilation)
                sync()
                t = math.inf
                for _ in range(_REPEATS[self.mode]):
                    t0 = time.perf_counter()
                    run()
                    sync()
                    t = min(t, time.perf_counter() - t0)
                self.timed += 1 + _REPEATS[self.mode]
            except Exception as e:  # a size the device rejects for this kernel: not a candidate
                log.debug("tuning %s: work group %s rejected (%s)", kernel, wg, e)
                continue
            if t < best_t:
                best, best_t = wg, t
        self.results[key] = best
        return best

    @staticmethod
    def _fits(wg: tuple[int, int, int], info: Any, limit: int | None) -> bool:
        """A loaded result is used only within this device's (and kernel's) limits."""
        max_total = int(getattr(info, "max_workgroup_size", 256) or 256)
        if limit:
            max_total = min(max_total, int(limit))
        dims = tuple(getattr(info, "max_workgroup_dims", (256, 256, 64)) or (256, 256, 64))
        return math.prod(wg) <= max_total and all(w <= d for w, d in zip(wg, dims, strict=False))

    # -- persistence (the serialization cache stores these as JSON)
    def dump(self) -> dict[str, list[int]]:
        """The results as ``{"device|driver|hash|gx,gy,gz": [wx, wy, wz]}`` (JSON-able)."""
        return {"|".join((*k[:3], ",".join(map(str, k[3])))): list(v) for k, v in self.results.items()}

    def load(self, data: Mapping[Any, Any]) -> int:
        """Merge results from :meth:`dump` output (or a dict with :data:`TuningKey` keys); returns how
        many were taken.  Malformed entries are skipped: a stale cache must not break prepare."""
        n = 0
        for k, v in dict(data).items():
            try:
                if isinstance(k, str):
                    name, driver, h, grid = k.rsplit("|", 3)
                    key: TuningKey = (name, driver, h, tuple(int(x) for x in grid.split(",")))  # type: ignore[assignment]
                else:
                    name, driver, h, grid = k
                    key = (str(name), str(driver), str(h), tuple(int(x) for x in grid))  # type: ignore[assignment]
                wg = tuple(int(x) for x in v)
                if len(key[3]) != 3 or len(wg) != 3 or min(wg) < 1:
                    continue
            except (TypeError, ValueError):
                continue
            self.results[key] = wg  # type: ignore[assignment]
            n += 1
        return n
