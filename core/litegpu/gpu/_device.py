"""The device interface a GPU runtime implements: allocator, compiler, program, queue.

Everything above this line is shared by every GPU backend (graph passes,
layout, memory planning, kernel rendering, the executor in ``_runtime.py``);
a backend implements only this class, in the spirit of tinygrad's one small
runtime module per device.  Buffers and programs are opaque objects to the
core.  All methods may raise :class:`litegpu.DelegateError`.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._records import dataclass  # no compiled methods: a warm start imports this module
from .kernels import RenderedKernel

__all__ = ["DeviceInfo", "GpuDevice", "BufferRef", "QueriedBeside", "RunStaging", "StartupTimer"]


@dataclass(frozen=True)
class DeviceInfo:
    """What the compiler and the cache need to know about a device."""

    api: str  # "opencl", "vulkan", "webgpu"
    name: str
    vendor: str
    driver_version: str
    fp16: bool  # half-precision storage and arithmetic available
    max_workgroup_size: int = 256
    max_workgroup_dims: tuple[int, int, int] = (256, 256, 64)  # per-axis limits of a work group
    buffer_alignment: int = 256  # sub-buffer offset alignment in bytes
    compute_units: int = 1
    # without ``fp16``: half buffers can still be loaded and stored with f32 arithmetic (OpenCL's
    # vload_half/vstore_half), so the fp16 precisions run as the storage-only half kernel variant
    fp16_storage: bool = False
    # the largest buffer one kernel may bind (WebGPU's max-storage-buffer-binding-size, Vulkan's
    # maxStorageBufferRange, OpenCL's max_mem_alloc_size); 0: not known
    max_buffer_bytes: int = 0
    # what one kernel launch costs the host through this API on this device (us), where an invoke enqueues its
    # launches one by one (OpenCL without command buffers) and the queue drains no faster than the host enqueues
    # them; the backend's own measured figure.  The cost model takes a launch's share of an invoke to be at least
    # this (``_cost.profile_for``, ``_cost.in_invoke``), so the plan for such an API fuses where the launches are
    # shorter than the host's enqueue.  0: the launches are replayed from a recording (a Vulkan command buffer), or
    # the figure is not known
    launch_host_us: float = 0.0


# BufferRef, RunStaging and StartupTimer are plain classes, not dataclasses: this module loads in every
# warm start, where creating a dataclass costs about a millisecond (docs/performance.md, sixth session)


class BufferRef:
    """A byte range of a device buffer (an arena slice or a whole buffer).  Immutable; equal when the
    buffer (the same object), offset and size are."""

    __slots__ = ("buffer", "offset", "nbytes")

    def __init__(self, buffer: Any, offset: int, nbytes: int) -> None:
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "nbytes", nbytes)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"BufferRef is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"BufferRef is immutable (cannot delete {name!r})")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not BufferRef:
            return NotImplemented
        return (self.buffer, self.offset, self.nbytes) == (other.buffer, other.offset, other.nbytes)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((self.buffer, self.offset, self.nbytes))

    def __repr__(self) -> str:
        return f"BufferRef(buffer={self.buffer!r}, offset={self.offset!r}, nbytes={self.nbytes!r})"

    def __reduce__(self) -> tuple[Any, tuple[Any, int, int]]:  # copy / pickle through __init__ (immutable)
        return BufferRef, (self.buffer, self.offset, self.nbytes)


class RunStaging:
    """Several runs of one recording submitted as one (:meth:`GpuDevice.record_runs`): the API's
    ``recording`` of up to ``capacity`` runs and, per upload and per download in the order given, a
    ``uint8`` array of shape ``(capacity, bytes)`` over host memory the device maps: the host writes
    run ``i``'s input bytes into row ``i`` of ``inputs[j]`` before :meth:`GpuDevice.replay_runs` and
    reads run ``i``'s outputs from row ``i`` of ``outputs[j]`` once that submission's token is waited
    for (:meth:`GpuDevice.wait_reads`)."""

    __slots__ = ("recording", "capacity", "inputs", "outputs")

    def __init__(self, recording: Any, capacity: int, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        self.recording, self.capacity, self.inputs, self.outputs = recording, capacity, inputs, outputs

    def __repr__(self) -> str:
        return f"RunStaging(recording={self.recording!r}, capacity={self.capacity!r}, ...)"


class StartupTimer:
    """Where a device's creation goes: :meth:`lap` adds the time since the previous lap (or the
    timer's creation) to ``ms[step]``.  A device keeps ``ms`` as ``startup_ms`` for
    ``bench/init_breakdown.py``, which prints the driver's parts (enumeration, context, queue) apart."""

    __slots__ = ("ms", "_t")

    def __init__(self, ms: dict[str, float] | None = None) -> None:
        self.ms: dict[str, float] = {} if ms is None else ms
        self._t = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.ms[step] = self.ms.get(step, 0.0) + (now - self._t) * 1e3
        self._t = now


class OpenedBeside:
    """A driver object made on a thread while the caller goes on (a device, a context: 100-1100 ms on
    NVIDIA in calls that release the GIL), so a start overlaps it with reading and planning the model.
    :meth:`get` waits for it at its first use and raises ``failure(error)`` from its error there, at
    every use.  ``owner.device_open_ms`` is set to how long it took on its thread and
    ``owner.device_wait_ms`` to how long uses waited (``bench/init_breakdown.py`` prints both)."""

    def __init__(self, make: Callable[[], Any], name: str, failure: Callable[[BaseException], Exception],
                 owner: Any):
        self._value: Any = None
        self._error: BaseException | None = None
        self._failure = failure
        self._owner = owner
        owner.device_open_ms = owner.device_wait_ms = 0.0

        def run() -> None:
            t0 = time.perf_counter()
            try:
                self._value = make()
            except BaseException as e:  # noqa: BLE001 - handed to the first user
                self._error = e
            finally:
                owner.device_open_ms = (time.perf_counter() - t0) * 1e3

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()

    def get(self) -> Any:
        value = self._value
        if value is None:
            if self._thread.is_alive():
                t0 = time.perf_counter()
                self._thread.join()
                self._owner.device_wait_ms += (time.perf_counter() - t0) * 1e3
            value = self._value
            if value is None:
                raise self._failure(self._error or RuntimeError("nothing made")) from self._error
        return value

    def ready(self) -> bool:
        """Whether the object is made already (never waits)."""
        return self._value is not None

    def done(self) -> Any:
        """The object once made (waiting for its thread), or None when it failed; never raises."""
        self._thread.join()
        return self._value


class QueriedBeside:
    """A device's :class:`DeviceInfo` as a start on a thread learns it (its queries come before the
    context or ``vkCreateDevice``, which :class:`OpenedBeside` waits for): :meth:`get` waits until
    the thread sets it, or raises ``failure(error)`` where the start failed first.  A device that
    starts in the caller's thread sets it at once.  Every backend whose driver starts on a thread
    (opencl, vulkan) keeps its ``info`` here."""

    def __init__(self) -> None:
        self.value: DeviceInfo | None = None
        self.error: BaseException | None = None
        self._known = threading.Event()

    def set(self, info: DeviceInfo) -> None:
        self.value = info
        self._known.set()

    def fail(self, error: BaseException) -> None:
        """The start failed before the device was known: :meth:`get` raises from ``error``."""
        self.error = error
        self._known.set()

    def get(self, failure: Callable[[BaseException | None], BaseException]) -> DeviceInfo:
        value = self.value
        if value is None:
            self._known.wait()
            value = self.value
            if value is None:
                raise failure(self.error)
        return value


class GpuDevice(ABC):
    """One GPU API bound to one device and one in-order queue."""

    #: the kernel dialect this API consumes ("opencl", "glsl", "wgsl")
    dialect: str = ""
    info: DeviceInfo
    #: the device's creation, ms by step (:class:`StartupTimer`); empty when the device does not say
    startup_ms: dict[str, float] = {}  # noqa: RUF012 - read-only default, devices assign their own
    #: a device (context) made on a thread beside the caller (:class:`OpenedBeside`): ms it took there,
    #: and ms the first use waited for it
    device_open_ms: float = 0.0
    device_wait_ms: float = 0.0

    # -- allocator
    @abstractmethod
    def alloc(self, nbytes: int) -> Any:
        """A device buffer of at least ``nbytes`` bytes (contents undefined)."""

    def alloc_boundary(self, nbytes: int, is_input: bool) -> Any:
        """A buffer that crosses the partition's boundary on every invoke: the host writes it before
        the launches (``is_input``) or reads it after them, and the launches read or write it once.  A
        device may place it in memory the host maps, so that no staging copy runs (Vulkan on a discrete
        GPU); the default is :meth:`alloc`."""
        return self.alloc(nbytes)

    def alloc_partition(self, asks: Sequence[tuple[int, bool | None]], alignment: int) -> tuple[list[BufferRef], str]:
        """Every buffer a partition's launches bind, asked for at once: per ``(nbytes, crossing)`` a range of
        ``nbytes`` (``crossing``: True for a buffer the host writes on every invoke, False for one it reads,
        as :meth:`alloc_boundary` takes them; None for neither), and where they lie in one allocation, the
        ``render(..., base_pointer=...)`` its kernels take it with (the ranges then start at multiples of
        ``alignment``).  The default: an allocation each (:meth:`alloc`, :meth:`alloc_boundary`), kernels
        with a binding per buffer (``""``)."""
        return [BufferRef(self.alloc(n) if crossing is None else self.alloc_boundary(n, crossing), 0, n)
                for n, crossing in asks], ""

    #: True when :meth:`upload` has taken its own copy of ``data`` when it returns, so the caller may
    #: change the array at once (Vulkan: into mapped staging memory; WebGPU: ``write_buffer``).  The
    #: asynchronous run path then hands it the caller's buffer memory instead of a copy.
    upload_copies: bool = False

    @abstractmethod
    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        """Copy host bytes into ``ref`` (may return before the copy ends; ``data`` stays alive and
        unchanged until then, unless :attr:`upload_copies`)."""

    def host_input_array(self, ref: BufferRef) -> np.ndarray | None:
        """Host memory (a C-contiguous uint8 array of ``ref.nbytes``) that :meth:`upload` to ``ref`` sends
        from without a host copy when its ``data`` is that very array, or None (the default: no such
        memory).  The executor offers it as the input's home (``DelegateKernel.input_buffer``), so the
        interpreter's ``set_tensor`` writes the value there: OpenCL gives the pinned memory its DMA reads
        (an upload from pageable memory costs NVIDIA's driver a copy of its own, on the invoke's path).
        The array must stay valid while anything references it, whatever the device does meanwhile
        (its base owns the memory); the caller writes it only between runs.  After a re-plan the
        interpreter keeps an unchanged input's array, so such memory may be uploaded to another ``ref``
        than the one it was made for: an upload from it must still send it without a host copy (OpenCL
        looks it up by its address)."""
        return None

    @abstractmethod
    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        """Copy ``ref`` into the host array ``out``, after all queued work; blocks."""

    def download_many(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> None:
        """:meth:`download` of each ``(ref, out)``; blocks until all are done.  An API that can queue
        the reads and wait once (OpenCL) overrides it."""
        for ref, out in items:
            self.download(ref, out)

    # -- asynchronous reads (optional): the executor's submit/complete split (CompiledModel.run_async)
    # queues a run's output reads with read_async and waits for them later with wait_reads.  The
    # default defers the reads to wait_reads, which is correct as long as the caller does not reuse the
    # buffers before it (the executor guarantees that); an API that can queue reads and wait on just
    # those (OpenCL events) overrides all three, so waiting for one run does not wait for later ones.
    def read_async(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> Any:
        """Queue the reads of ``(ref, out)`` after all queued work; a token for :meth:`wait_reads`."""
        return list(items)

    def wait_reads(self, token: Any) -> None:
        """Block until the reads of a :meth:`read_async` token are in their host arrays."""
        if token:
            self.download_many(token)
        else:
            self.finish()

    def reads_done(self, token: Any) -> bool:
        """Whether :meth:`wait_reads` would return at once.  Without a way to ask the API, the
        default waits (so a polling loop ends) and says True."""
        self.wait_reads(token)
        return True

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        """Device-to-device copy of ``src`` into ``dst`` (queued).  The default goes via the host."""
        host = np.empty(min(src.nbytes, dst.nbytes), np.uint8)
        self.download(src, host)
        self.upload(dst, host)

    # -- compiler / program
    #: how many threads may call :meth:`compile`, :meth:`program_from_binary` and
    #: :meth:`program_binary` at once (for different sources) while a partition is prepared: the
    #: driver compiles in its own threads and Python only waits.  1 (the default) where the API or
    #: its binding is not known to be thread-safe.
    compile_threads: int = 1

    @abstractmethod
    def compile(self, kernel: RenderedKernel) -> Any:
        """A program object ready to launch ``kernel`` (compiled once, reused)."""

    def compile_group(self, kernels: Sequence[RenderedKernel]) -> list[Any] | None:
        """One program holding all of ``kernels`` (the executor asks once per partition), as one
        launchable handle per kernel, in order: every handle is a program for :meth:`bind` and
        :meth:`program_binary` (which gives the group's one binary).  One build instead of one per
        kernel pays a driver's fixed cost per program once (OpenCL: one ``clBuildProgram``; warm,
        one binary to load).  None where the API has no such thing (the default) or the combined
        build failed: the executor then builds the kernels one by one, which names a failing one."""
        return None

    def group_from_binary(self, kernels: Sequence[RenderedKernel], binary: bytes) -> list[Any] | None:
        """:meth:`compile_group`'s handles rebuilt from the group's :meth:`program_binary`; None if
        rejected."""
        return None

    def prefetch_programs(  # noqa: B027 - optional hook
            self, programs: Sequence[tuple[RenderedKernel, bytes]], cache_blob: bytes | None = None) -> None:
        """A warm start's programs, known from the cache entry before the partition packs and uploads its
        weights: ``(kernel, its program_binary)`` per source, and the entry's :meth:`cache_blob` data
        (:meth:`load_cache_blob` is still called with it later; a device that rebuilds programs here must
        load it before them, or they would not find what it holds).  A device may begin rebuilding them
        (and what follows, such as pipelines) in the background here; :meth:`program_from_binary` is
        still called for each, later, and must answer as it would have (the program begun here, or
        None).  The default does nothing: programs are rebuilt when the launches are prepared."""

    def prepare_bindings(  # noqa: B027 - optional hook
            self, program: Any, kernel: RenderedKernel, buffer_sets: Sequence[Sequence[BufferRef | None]]) -> None:
        """Build ahead what :meth:`bind` will need beyond ``program`` for each of ``buffer_sets`` (the
        buffers of every launch of ``kernel``, in binding order; None for a constant's buffer, which
        is allocated later and never written).  Called on a compile thread right after the program is
        built, so an API whose pipelines depend on the bindings (WebGPU declares a read binding that
        aliases a written buffer ``read_write``) builds those variants in parallel instead of one by
        one in :meth:`bind`.  The default does nothing."""

    @abstractmethod
    def bind(self, program: Any, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> Any:
        """A launchable object with its buffers and params bound (done once at prepare)."""

    @abstractmethod
    def launch(self, bound: Any, kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        """Enqueue one launch of ``grid`` work items (no host synchronisation)."""

    # -- batching (optional): the executor records a partition's launches once at prepare and
    # replays them on every invoke.  An API that can pre-record (a Vulkan command buffer) or batch
    # (one WebGPU compute pass per submit) overrides both; the default replays launch() calls.
    def record(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
               uploads: Sequence[BufferRef] = (), downloads: Sequence[BufferRef] = ()) -> Any:
        """A replayable object for ``(bound, kernel, grid)`` launches, in order (done once at prepare).

        ``uploads`` / ``downloads``: the buffers the host writes before each replay (:meth:`upload`)
        and reads after it (:meth:`download`).  An API that can put those transfers in the same
        submission (Vulkan: copies from / into persistently mapped staging memory) records them;
        the default ignores them (upload and download do their own transfers)."""
        return list(launches)

    def replay(self, recording: Any) -> None:
        """Enqueue a :meth:`record` result (no host synchronisation)."""
        for bound, kernel, grid in recording:
            self.launch(bound, kernel, grid)

    # -- several runs as one submission (optional): CompiledModel.run_rows_async hands a partition K
    # runs at once; an API that can submit K recorded runs together and wait once (Vulkan: K command
    # buffers in one vkQueueSubmit under one fence) overrides both, so the host's work and its
    # driver calls (each one a GIL hand-off) are per K runs.  The default (None) makes the executor
    # submit the runs one by one, as run_async does.
    def record_runs(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
                    uploads: Sequence[BufferRef], downloads: Sequence[BufferRef], capacity: int) -> RunStaging | None:
        """A recording of up to ``capacity`` runs of ``launches`` (done once per partition copy), each
        run reading ``uploads`` from its row of :attr:`RunStaging.inputs` and writing ``downloads``
        into its row of :attr:`RunStaging.outputs`; None where the API cannot (the default)."""
        return None

    def replay_runs(self, staging: RunStaging, runs: int) -> Any:
        """Submit the first ``runs`` runs of a :meth:`record_runs` recording (no host wait); a token for
        :meth:`wait_reads` and :meth:`reads_done`.  The caller waits for it before writing the rows again."""
        raise NotImplementedError(f"{type(self).__name__} has no record_runs")

    #: what :meth:`profile_launches` measures on this device (overridden where the API times the GPU)
    profile_source: str = "host: launch + wait per kernel (this API gives no GPU timestamps here)"

    def profile_launches(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
                         runs: int = 10) -> list[float]:
        """Time of each ``(bound, kernel, grid)`` launch in microseconds, the median of ``runs``
        passes over the list run one at a time (``litegpu benchmark --profile``; the launches'
        buffers must be bound).  The default waits for each launch on the host, so the times
        include the launch and the wait; APIs with GPU timers override it and say so in
        :attr:`profile_source`."""
        samples: list[list[float]] = [[] for _ in launches]
        self.finish()
        for _ in range(max(1, runs)):
            for i, (bound, kernel, grid) in enumerate(launches):
                t = time.perf_counter()
                self.launch(bound, kernel, grid)
                self.finish()
                samples[i].append((time.perf_counter() - t) * 1e6)
        return [float(np.median(s)) for s in samples]

    def recording_stats(self, recording: Any) -> dict[str, int]:
        """What one replay of ``recording`` costs in API terms (submits, barriers, copies), for
        ``describe()``; empty when the API has nothing to say."""
        return {}

    @abstractmethod
    def finish(self) -> None:
        """Wait for everything queued."""

    def kernel_max_workgroup(self, bound: Any) -> int | None:
        """The most threads a work group of this bound kernel may have (register pressure can put it
        below the device's), or None when the API does not say."""
        return None

    # -- serialization (optional)
    def program_binary(self, program: Any) -> bytes | None:
        """The compiled program's binary for the cache, or None if the API has none."""
        return None

    def program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> Any | None:
        """Rebuild a program from :meth:`program_binary` output; None if rejected."""
        return None

    def cache_blob(self) -> bytes | None:
        """Device-wide compiled state worth persisting beside the programs (Vulkan: the pipeline
        cache's data), or None."""
        return None

    def load_cache_blob(self, blob: bytes) -> None:  # noqa: B027 - optional hook
        """Take :meth:`cache_blob` data of an earlier run (ignored when it does not fit the device)."""

    def close(self) -> None:  # noqa: B027 - optional hook: most APIs free everything with their objects
        """Release the device (queues, contexts)."""
