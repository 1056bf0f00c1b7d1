"""Vulkan through ``_vk`` (the ``vulkan`` package's cffi declarations): device selection, allocator, compiler,
program, queue.

The whole API-specific part of the backend; the core's GPU executor does the rest.  One
instance, one logical device, one compute queue.  A partition's launches are recorded once into
one command buffer (:meth:`VulkanDevice.record`) and resubmitted with a fence per invoke
(:meth:`VulkanDevice.replay`).

Keep-alive rule (why so many names below): ``_vk``'s struct constructors keep what a struct's
pointer fields reach (a ``char[]`` for a string, an array for a list, a nested struct) alive only as
long as that struct, through a weak-keyed dict.  A struct copied *by value* (into an array of structs,
or the shader stage inside VkComputePipelineCreateInfo) is a copy that keeps nothing alive.  Memory
freed before the driver reads it: lavapipe happens to survive it, NVIDIA fails with VK_ERROR_UNKNOWN
or garbage.  So every string, nested struct and array handed to a create call is a named variable
(or an ``ffi.new`` we own) that lives until the call returns.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from litegpu import BackendUnavailableError, DelegateError
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice, QueriedBeside, RunStaging, StartupTimer
from litegpu.gpu.spirv import compile_spirv, find_glsl_compiler

from . import _vk as vk
from ._instance import CREATED_MS, _Candidate, _shared_instance, after_instance, list_devices

log = logging.getLogger("litegpu")

if TYPE_CHECKING:
    from litegpu.gpu.kernels import RenderedKernel

__all__ = ["VulkanDevice", "list_devices", "MEMORY_MODES"]

ffi = vk.ffi
_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x10005: "Mesa", 0x13B5: "ARM",
            0x5143: "Qualcomm", 0x1010: "Imagination", 0x106B: "Apple"}
#: extensions enabled when present (promoted to core in 1.1/1.2; needed for fp16 on 1.1 devices)
_FP16_EXTENSIONS = ("VK_KHR_16bit_storage", "VK_KHR_storage_buffer_storage_class",
                    "VK_KHR_shader_float16_int8")
MEMORY_MODES = ("auto", "device_local", "host_visible")

_HV = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
_DL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
#: size of one memory block that buffers are sub-allocated from (a larger buffer gets its own)
_BLOCK_BYTES = 64 << 20
#: the first block of a kind; each further one doubles, up to _BLOCK_BYTES. Allocating (and for staging,
#: mapping) a block costs the driver time by its size -- three 64 MiB blocks were 46 ms of a 0.43 s warm
#: start on an H200 for a model using 2.8 MiB of them
_FIRST_BLOCK_BYTES = 4 << 20
#: launches' params (tens of bytes each) are ranges of shared buffers of this size, and uploads up to
#: _SMALL_UPLOAD bytes share staging buffers of it: one vkCreateBuffer (and bind) for a partition's
#: params instead of two per launch (138 for pose_landmark_full's 69 launches on a discrete GPU)
_SHARED_BYTES = 64 << 10
#: A/B switch (``--set litegpu_vulkan._device.EARLY_PIPELINES=False``): False creates every pipeline at the
#: first record() that uses it (after the whole partition's renders) instead of right after its compile
EARLY_PIPELINES = True
#: A/B switches of a warm start (SPIR-V from the cache).  WARM_PREFETCH: the programs (layouts, shader
#: module) begin on the device's pool as soon as the executor has read the cache entry (``prefetch_programs``),
#: beside its packing and upload of the weights, instead of as the launches are prepared after them.
#: WARM_EARLY_PIPELINES: such a program's pipeline is created on the pool the moment the program is made,
#: instead of at the first record().  These two and _backend.DEVICE_BEFORE_EXECUTOR on against all three off
#: (bench/init_ab.py --pythonpath-b with a copy of this package, warm, 5 alternated pairs): H100,
#: face_detection_short_range / hand_landmark_full / pose_landmark_full +1 / -9 / -28 ms (pose: the main
#: thread's CPU 153 against 201 ms: the programs' rebuild leaves it for idle cores); the 2-core CI machine
#: (lavapipe), face_detection_short_range / hand_landmark_full / selfie_segmentation -1 / -5 / +0 ms, 10
#: pairs, load 1.5: there the pipelines are CPU work on the same two cores as the caller's packing.  Each
#: alone on pose, H100 (5 pairs, load 3-3.5, noisy): WARM_PREFETCH off +10 ms, WARM_EARLY_PIPELINES off -18.
#: (An A/B through ``--set litegpu_vulkan._device.NAME`` imports this module before the start: biased.)
WARM_EARLY_PIPELINES = True
WARM_PREFETCH = True
_SMALL_UPLOAD = 4096
#: A/B switches, read at allocation (``GpuDevice.alloc_boundary``): on a discrete GPU, a partition's
#: inputs that the host writes (HOST_BOUNDARY) and its host outputs that no launch reads
#: (HOST_BOUNDARY_OUTPUTS) in host-mapped memory, so that the invoke's command buffer holds no staging
#: copy (and no barrier) for them.  Inputs: on (H100, bench/vk_host_path.py, with fence polling: -25 to
#: -73 us a host-to-host invoke on palm, selfie, face_landmark; the host's memcpy into VRAM across the bus
#: costs about what the recorded copy did on the GPU, the barrier and the copy's own start go).  Outputs:
#: off: the launches' stores across the bus into host memory cost more GPU time than the recorded copy
#: (pose_landmark_full's 0.9 MB of outputs: GPU span 0.56 -> 0.91 ms)
HOST_BOUNDARY = True
HOST_BOUNDARY_OUTPUTS = False
#: where a boundary input lives with HOST_BOUNDARY: "bar" = device-local host-visible memory where the
#: device has it (the launches read VRAM, the host writes across the bus), "system" = host memory that
#: the launches read across the bus (slower on every model measured, H100)
BOUNDARY_INPUT_MEMORY = "bar"
#: A/B switch, read at each wait: microseconds to poll a fence (vkGetFenceStatus) before blocking in
#: vkWaitForFences, on a GPU (never on a CPU implementation, whose work would lose the core).  A blocked
#: wait returns 25-70 us later than polling on NVIDIA's driver (H100, submit to wake: palm 0.446 / 0.408
#: ms, pose 0.629 / 0.578), and the core it slept on runs the next invoke's host work slower; 0 = block
#: at once.  Work longer than this blocks as before.
FENCE_SPIN_US = 2000.0
#: A/B switch, read at each submit: a recording's two fences alternate, the idle one reset while the
#: other's submission runs (vkResetFences off the path between the host's writes and the GPU's start).
#: Off: not yet measured on a GPU (bench/vk_host_path.py has its variants: reset-beside, default-no-reset)
RESET_BESIDE = False
_USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
          | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
_COMPUTE = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
_TRANSFER = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
_SHADER_RW = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
_WRITES = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
_READS = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_UNIFORM_READ_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT
          | vk.VK_ACCESS_HOST_READ_BIT)


def _vk_call(what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except (vk.VkError, vk.VkException) as e:
        raise DelegateError(f"Vulkan {what} failed: {type(e).__name__}") from e


class _Resource:
    """A group of Vulkan handles destroyed together, when garbage collected or at device close.

    The destroy calls live in the device (``dev._owned``), not in this object: when a device and its
    resources become garbage together, the collector clears weak references and runs finalizers in
    no useful order, and the device must still destroy every child before itself.
    """

    def __init__(self, dev: VulkanDevice):
        self._dev: VulkanDevice | None = dev
        self._undo: list[tuple[Any, tuple]] = []  # (vkDestroyX, args), run in reverse
        dev._owned[id(self)] = self._undo

    def _on_release(self, fn: Any, *args: Any) -> None:
        self._undo.append((fn, args))

    def _release(self) -> None:
        dev, self._dev = self._dev, None
        if dev is not None and dev._device is not None:
            dev.finish()  # a fence covers all earlier submissions: nothing can still use these handles
            _run_undo(dev._owned.pop(id(self), []))

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # interpreter shutdown: the binding may be half torn down
            pass


def _run_undo(undo: list[tuple[Any, tuple]]) -> None:
    for fn, args in reversed(undo):
        fn(*args)
    undo.clear()


class _Block:
    """One VkDeviceMemory allocation that many buffers are bound into (sub-allocation).

    Freed when the last buffer bound into it is released; ``host`` maps the whole block once
    (persistently) when its memory type is host-visible."""

    def __init__(self, dev: VulkanDevice, type_index: int, size: int, kind: str):
        self.type_index, self.size, self.kind, self.used, self.live = type_index, size, kind, 0, 0
        # end offset of each live range: when the top ones are released the bump pointer goes back,
        # so a block kept alive by one long-lived buffer is reused (it grew by a model's working set
        # per interpreter until full: +23% RSS over 50 lifetimes on lavapipe, issue 19)
        self.ends: dict[int, int] = {}
        d = dev._device
        alloc_info = vk.VkMemoryAllocateInfo(allocationSize=size, memoryTypeIndex=type_index)
        self.memory = vk.vkAllocateMemory(d, alloc_info, None)  # may raise VkErrorOutOf*Memory
        self.flags = dev._mem_flags[type_index]
        self.host: np.ndarray | None = None
        if self.flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT:
            self.host = np.frombuffer(vk.vkMapMemory(d, self.memory, 0, size, 0), np.uint8)


class _Buffer(_Resource):
    """One VkBuffer bound at an offset of a shared :class:`_Block`; ``host`` is a uint8 view of its
    bytes in the persistent mapping when the memory is host-visible.  ``kind`` is what the memory is
    for: ``device`` (tensors, weights, params), ``upload`` / ``readback`` (staging, and boundary outputs),
    ``input`` (boundary inputs)."""

    def __init__(self, dev: VulkanDevice, nbytes: int, kind: str):
        super().__init__(dev)
        self.nbytes = nbytes
        self.kind = kind
        self.busy: _Recording | None = None  # the last submission that used this buffer
        self.copies: dict[tuple, _Recording] = {}  # recorded device-to-device copies into this buffer
        # by offset: the persistently mapped staging buffers of a boundary input / host output here
        self.shadows: dict[int, _Buffer] = {}
        self.readbacks: dict[int, _Buffer] = {}
        self.source_id = 0  # a readback buffer: id() of the buffer it copies out of
        d = dev._device
        create_info = vk.VkBufferCreateInfo(size=nbytes, usage=_USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        self.handle = _vk_call("vkCreateBuffer", vk.vkCreateBuffer, d, create_info, None)
        self._on_release(vk.vkDestroyBuffer, d, self.handle, None)
        req = vk.vkGetBufferMemoryRequirements(d, self.handle)
        self.block, self.offset = dev._suballoc(kind, int(req.size), int(req.alignment), int(req.memoryTypeBits))
        # undo runs in reverse: the buffer is destroyed before its block can be freed
        self._on_release(dev._unref_block, self.block, self.offset)
        vk.vkBindBufferMemory(d, self.handle, self.block.memory, self.offset)
        self.host: np.ndarray | None = None
        # device_local mode never maps tensor memory, even where the driver could (lavapipe's one
        # memory type is host-visible): transfers take the staging path a discrete GPU takes
        if self.block.host is not None and (kind != "device" or dev.memory_mode == "host_visible"):
            self.host = self.block.host[self.offset:self.offset + nbytes]

    @property
    def memory_flags(self) -> int:
        return self.block.flags


class _Program(_Resource):
    """Descriptor set layout and pipeline layout now; shader module and pipeline on the thread that
    finishes its SPIR-V compile (:meth:`start_early`: beside the caller rendering and binding the
    partition's next kernels), else at the first :meth:`VulkanDevice.record` that uses the program,
    together with every other pending program in one ``vkCreateComputePipelines`` call per thread.
    ``spirv`` is bytes or a future of the compile running on the device's thread pool (glslc runs for
    all kernels at once)."""

    def __init__(self, dev: VulkanDevice, kernel: RenderedKernel, spirv: bytes | Future[bytes]):
        super().__init__(dev)
        d = dev._device
        self.name = kernel.name
        self.entry = kernel.entry_point
        self._spirv = spirv
        self.module: Any = None
        self.pipeline: Any = None
        self._early: threading.Event | None = None  # set once start_early's attempt is over
        self.types = [vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER if b.kind == "uniform"
                      else vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER for b in kernel.bindings]
        # the bindings array is ours (ffi.new), so nothing in it can be freed before the call
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", len(self.types))
        for i, t in enumerate(self.types):
            bindings[i].binding = i
            bindings[i].descriptorType = t
            bindings[i].descriptorCount = 1
            bindings[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
        dsl_info = vk.VkDescriptorSetLayoutCreateInfo(bindingCount=len(self.types), pBindings=bindings)
        self.set_layout = vk.vkCreateDescriptorSetLayout(d, dsl_info, None)
        self._on_release(vk.vkDestroyDescriptorSetLayout, d, self.set_layout, None)
        set_layouts = ffi.new("VkDescriptorSetLayout[1]", [self.set_layout])
        pl_info = vk.VkPipelineLayoutCreateInfo(setLayoutCount=1, pSetLayouts=set_layouts)
        self.layout = vk.vkCreatePipelineLayout(d, pl_info, None)
        self._on_release(vk.vkDestroyPipelineLayout, d, self.layout, None)

    def start_early(self) -> None:
        """Create the module and pipeline right after the SPIR-V compile, on the thread that ran it
        (cold pose_landmark_full: the pipelines' driver compile, 0.37 s on an H200, then overlaps the
        renders of the kernels after it instead of following all of them); with SPIR-V from the cache
        (a warm start), on the device's pool now.  A failure here is left to
        :meth:`VulkanDevice._create_pipelines`, which tries again and names the kernel."""
        fut = self._spirv
        self._early = threading.Event()
        if isinstance(fut, Future):
            fut.add_done_callback(self._create_early)
        else:
            self._dev._executor().submit(self._create_early, None)

    def _create_early(self, fut: Future[bytes] | None) -> None:
        try:
            if fut is None or (not fut.cancelled() and fut.exception() is None):
                self._create_module()
                self._dev._create_pipeline_batch([self])
        except Exception:  # noqa: BLE001, S110 - see start_early: record() tries again and reports
            pass
        finally:
            assert self._early is not None
            self._early.set()

    @property
    def spirv(self) -> bytes:
        if isinstance(self._spirv, Future):
            self._spirv = self._spirv.result()  # re-raises the compile's DelegateError
        return self._spirv

    def _create_module(self) -> None:
        d = self._dev._device
        spirv = self.spirv
        module_info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv)
        self.module = _vk_call(f"vkCreateShaderModule ({self.name})", vk.vkCreateShaderModule, d, module_info, None)
        self._on_release(vk.vkDestroyShaderModule, d, self.module, None)


class _Bound:
    """A launch's buffers and its params uniform buffer, and the descriptor set holding them.  The sets
    are allocated and written together, for every launch of a recording at once
    (:meth:`VulkanDevice._allocate_sets`: one pool, one vkAllocateDescriptorSets, one
    vkUpdateDescriptorSets): a warm start binds every launch of a partition from its cached records,
    and one pool, one allocation and one update per launch were most of its binding time."""

    def __init__(self, dev: VulkanDevice, program: _Program, kernel: RenderedKernel,
                 buffers: Sequence[BufferRef], params: dict[str, Any]):
        self.program = program
        refs = list(buffers)
        n_storage = sum(1 for b in kernel.bindings if b.kind == "storage")
        if len(refs) != n_storage:
            raise DelegateError(f"kernel {kernel.name} takes {n_storage} buffers, {len(refs)} given")
        self.params_buffer = None
        if any(b.kind == "uniform" for b in kernel.bindings):
            data = kernel.pack_params(params)
            ref = dev._params_ref(len(data))  # a range of a buffer the device's params share
            self.params_buffer = ref.buffer  # held: the shared buffer lives while a set points into it
            dev.upload(ref, np.frombuffer(data, np.uint8))
            refs.append(ref)
        for i, r in enumerate(refs):
            if r.offset % dev.info.buffer_alignment:
                raise DelegateError(f"kernel {kernel.name}: binding {i} offset {r.offset} is not a multiple "
                                    f"of the device's {dev.info.buffer_alignment}-byte alignment")
        self.refs = refs
        # (binding, buffer, offset, end, writes) for hazard tracking at record time
        self.uses = [(b.index, r.buffer, r.offset, r.offset + r.nbytes, b.access != "read")
                     for b, r in zip(kernel.bindings, refs, strict=True)]
        self.set: Any = None  # VkDescriptorSet, once allocated (VulkanDevice._allocate_sets)
        self.pool: _SetPool | None = None  # held: the pool lives while a set of it is in use


class _SetPool(_Resource):
    """One descriptor pool holding the sets of several launches (destroyed with the last of them)."""

    def __init__(self, dev: VulkanDevice, bounds: Sequence[_Bound]):
        super().__init__(dev)
        d = dev._device
        counts: dict[int, int] = {}
        for b in bounds:
            for t in b.program.types:
                counts[t] = counts.get(t, 0) + 1
        sizes = ffi.new("VkDescriptorPoolSize[]", len(counts))
        for i, (t, n) in enumerate(counts.items()):
            sizes[i].type = t
            sizes[i].descriptorCount = n
        pool_info = vk.VkDescriptorPoolCreateInfo(maxSets=len(bounds), poolSizeCount=len(counts), pPoolSizes=sizes)
        self.pool = vk.vkCreateDescriptorPool(d, pool_info, None)
        self._on_release(vk.vkDestroyDescriptorPool, d, self.pool, None)
        layouts = ffi.new("VkDescriptorSetLayout[]", [b.program.set_layout for b in bounds])
        alloc_info = vk.VkDescriptorSetAllocateInfo(descriptorPool=self.pool, descriptorSetCount=len(bounds),
                                                    pSetLayouts=layouts)
        sets = _vk_call("vkAllocateDescriptorSets", vk.vkAllocateDescriptorSets, d, alloc_info)
        # buffer infos and writes are arrays we own: the writes point into `infos`, alive to the call
        n = sum(len(b.refs) for b in bounds)
        infos = ffi.new("VkDescriptorBufferInfo[]", n)
        writes = ffi.new("VkWriteDescriptorSet[]", n)
        k = 0
        for j, b in enumerate(bounds):
            b.set, b.pool = sets[j], self
            types = b.program.types
            for i, r in enumerate(b.refs):
                infos[k].buffer = r.buffer.handle
                infos[k].offset = r.offset
                infos[k].range = max(int(r.nbytes), 4)
                writes[k].sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                writes[k].dstSet = b.set
                writes[k].dstBinding = i
                writes[k].descriptorCount = 1
                writes[k].descriptorType = types[i]
                writes[k].pBufferInfo = infos + k
                k += 1
        vk.vkUpdateDescriptorSets(d, n, writes, 0, None)


class _Recording(_Resource):
    """A command buffer recorded once, with the fence of its latest submission; ``count`` > 1: that
    many command buffers (``cmds``; one run each, :meth:`VulkanDevice.record_runs`), of which a
    submission takes the first few, under the one fence."""

    def __init__(self, dev: VulkanDevice, buffers: Sequence[_Buffer], keep: Sequence[Any] = (), count: int = 1):
        super().__init__(dev)
        d = dev._device
        self.buffers = list({id(b): b for b in buffers}.values())  # with buffer_ids: set together
        self.keep = list(keep)  # the bound sets (and through them programs) the commands refer to
        alloc_info = vk.VkCommandBufferAllocateInfo(commandPool=dev._pool, commandBufferCount=count,
                                                    level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY)
        self._cmds = vk.vkAllocateCommandBuffers(d, alloc_info)  # a VkCommandBuffer[count] we own
        self.cmd = self._cmds[0]
        self.cmds = [self._cmds[i] for i in range(count)]
        self._on_release(vk.vkFreeCommandBuffers, d, dev._pool, count, self._cmds)
        self._submits: dict[int, tuple[Any, Any]] = {}  # by command buffers submitted: (VkSubmitInfo, its address)
        # two fences: the latest submission's (``fence``) and a spare that RESET_BESIDE resets while
        # that submission is on the GPU, so that the next submit needs no vkResetFences first
        self._fence_pair = [vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None) for _ in range(2)]
        for f in self._fence_pair:
            self._on_release(vk.vkDestroyFence, d, f, None)
        # the per-submit calls go to vk.lib directly with these prebuilt arguments: the binding's
        # wrappers convert every argument on every call (about as costly as a small model's GPU work)
        self._fence_arrays = [ffi.new("VkFence[1]", [f]) for f in self._fence_pair]
        self.fence, self.fences = self._fence_pair[0], self._fence_arrays[0]
        self.spare, self.spare_ready = 1, True  # the spare's index; whether it is unsignalled
        self.buffer_ids = frozenset(id(b) for b in self.buffers)
        self.pending = False
        self.writes_device = True  # False: a download's copy into staging (leaves the readbacks current)
        self.upload_keys: frozenset[int] = frozenset()  # ids of the upload buffers it copies from
        self.readbacks: list[_Buffer] = []  # the readback buffers its copies fill
        self.dispatches = self.barriers = self.copies = 0
        self.labels: list[tuple[str, int]] = []  # profile=True: what each timestamp pair measures
        self.query_pool: Any = None
        # built once and reused per submit; named so its command-buffer array stays alive
        self.submit_info = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=self._cmds)
        self.submit_ptr = ffi.addressof(self.submit_info)  # what vk.lib.vkQueueSubmit takes

    def submit_ptr_for(self, count: int) -> Any:
        """The VkSubmitInfo address submitting the first ``count`` command buffers (built once per count)."""
        if count == 1:
            return self.submit_ptr
        got = self._submits.get(count)
        if got is None:
            info = vk.VkSubmitInfo(commandBufferCount=count, pCommandBuffers=self._cmds)
            got = self._submits[count] = (info, ffi.addressof(info))
        return got[1]


class _Opening:
    """The device's creation, started on a driver thread (``VulkanDevice.__init__``): ``join`` waits for it."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()

    def join(self) -> None:
        self.done.wait()


def _barrier(cmd: Any, src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> None:
    barrier = vk.VkMemoryBarrier(srcAccessMask=src_access, dstAccessMask=dst_access)
    vk.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, 0, 1, barrier, 0, None, 0, None)


class VulkanDevice(GpuDevice):
    """One Vulkan physical device, one compute queue; see the module docstring.

    Args:
        device: index into :func:`list_devices` or a substring of a device name; ``None`` = the first
            (discrete GPUs first, then integrated, virtual, CPU implementations such as lavapipe).
        memory: ``host_visible`` (buffers mapped, transfers are memcpy), ``device_local`` (buffers in
            device memory, transfers through a staging buffer), ``auto`` = device_local on discrete GPUs.
        compiler: ``glslc`` or ``glslangValidator`` (name or path); ``None`` = whichever is installed.
        fence_timeout: seconds to wait for the GPU before raising DelegateError instead of hanging.
    """

    dialect = "glsl"
    # set before __init__ can fail: close() (and __del__) must work on a half-made device
    _opening: _Opening | None = None
    _open_error: BaseException | None = None
    _handle: Any = None

    def __init__(self, device: int | str | None = None, *, memory: str = "auto", compiler: str | None = None,
                 fence_timeout: float = 60.0, background: bool = False):
        if memory not in MEMORY_MODES:
            raise DelegateError(f"memory {memory!r} is not one of {', '.join(MEMORY_MODES)}")
        self._device = None
        self._owned: dict[int, list[tuple[Any, tuple]]] = {}  # destroy calls of live resources
        laps = StartupTimer()
        #: where the device's creation went, ms by step (bench/init_breakdown.py prints it)
        self.startup_ms = laps.ms
        self.compiler = find_glsl_compiler(compiler)
        if self.compiler is None:
            raise BackendUnavailableError(
                f"GLSL compiler {compiler!r} not found" if compiler else
                "no GLSL -> SPIR-V compiler: install glslc (Debian glslc) or glslangValidator (glslang-tools)")
        laps.lap("find compiler")
        self._timeout_ns = int(fence_timeout * 1e9)
        self._may_spin = False  # a GPU, not a CPU implementation (FENCE_SPIN_US): set by _select
        self.memory_mode = memory  # "auto" until _select resolves it by the device's kind
        self._staging: _Buffer | None = None
        self._blocks: dict[str, list[_Block]] = {}
        self._pending: list[tuple[BufferRef, BufferRef, int]] = []  # queued uploads into device memory
        self._dirty: dict[int, tuple[_Buffer, BufferRef]] = {}  # upload buffers written since a replay, by id
        # readback buffers the latest submission filled; weak, so that they (and the interpreter's
        # memory) go when their interpreter is dropped
        self._fresh: weakref.WeakSet[_Buffer] = weakref.WeakSet()
        self._xfer_rec: _Recording | None = None  # made on first use: it needs the device
        self._programs: dict[str, _Program] = {}
        self._spirv: dict[str, Future[bytes]] = {}  # by GLSL source
        self._prefetched: dict[str, Future[_Program | None]] = {}  # by GLSL source (prefetch_programs)
        self._pool_exec: ThreadPoolExecutor | None = None  # runs glslc
        self._loaded_blobs: set[bytes] = set()
        self._blob_lock = threading.Lock()
        #: pipelines created (early ones included), and record()-time creations (calls of _create_pipelines
        #: that had any left to create)
        self.pipelines_created = self.pipeline_batches = 0
        self._count_lock = threading.Lock()
        self._last: _Recording | None = None
        # the shared params buffer (weak: the sets bound to it hold it, so a dropped interpreter's
        # memory goes with it) and small-upload staging buffer (see _SHARED_BYTES), bytes used
        self._params_buf: weakref.ref[_Buffer] | None = None
        self._params_used = 0
        self._small_staging: _Buffer | None = None
        self._small_used = 0
        self._queried = QueriedBeside()  # ``info``, once the (background) start's queries are done
        self._open_error: BaseException | None = None
        #: ms the device's creation took on its thread, and ms the first use waited for it
        self.device_open_ms = self.device_wait_ms = 0.0
        if background:
            # the whole driver start on a thread: the instance (vkCreateInstance and the device
            # listing, 100-200 ms on NVIDIA), the queries and vkCreateDevice, while the caller
            # reads the model, prepares its nodes and reads the cache (cffi drops the GIL in the
            # driver's calls).  ``info`` waits for the queries, the device's first use for the rest;
            # either raises the start's failure (BackendUnavailableError, typed as before)
            target, args = self._start, (device, laps)
        else:
            target, args = self._create_device, self._select(device, laps)
        # vkCreateDevice (tens of ms on a discrete GPU's driver) runs on a thread while the caller
        # goes on reading and planning the model (cffi drops the GIL in the call): the thread making
        # the instance, after it, where that thread is still at work (_instance.after_instance); the
        # first use of the device waits for it (``_device``), and a failure is raised there
        opening = self._opening = _Opening()

        def open_device() -> None:
            try:
                target(*args)
            finally:
                opening.done.set()

        try:
            after_instance(open_device, "litegpu-vkCreateDevice")
        except BaseException:  # no thread started: nothing would ever set ``done`` (close() waits on it)
            opening.done.set()
            raise
        laps.lap("device (started)")

    @property
    def info(self) -> DeviceInfo:  # type: ignore[override]
        """The device's :class:`DeviceInfo`; with a background start, waits for the driver's queries
        (and raises the start's failure)."""
        return self._queried.get(lambda e: e or BackendUnavailableError("the Vulkan device failed to start"))

    @info.setter
    def info(self, value: DeviceInfo) -> None:
        self._queried.set(value)

    def _select(self, device: int | str | None, laps: StartupTimer) -> tuple[_Candidate, Any]:
        """The shared instance, the chosen physical device and its queries (sets ``info`` and the
        memory mode); returns the arguments of :meth:`_create_device`."""
        self._instance, cands = _shared_instance()  # not ours to destroy: see _shared_instance
        laps.lap("instance + enumerate")  # what this thread waited for it
        laps.ms["instance (made on its thread)"] = CREATED_MS.get("instance + enumerate", 0.0)
        if not cands:
            raise BackendUnavailableError("the Vulkan loader found no device with Vulkan 1.1 and a compute queue")
        if isinstance(device, str):
            matches = [c for c in cands if device.lower() in c.name.lower()]
            if not matches:
                raise BackendUnavailableError(f"no Vulkan device matches {device!r} (found: "
                                              f"{', '.join(c.name for c in cands)})")
            chosen = matches[0]
        else:
            idx = device or 0
            if not 0 <= idx < len(cands):
                raise BackendUnavailableError(f"Vulkan device index {idx} out of range (found {len(cands)})")
            chosen = cands[idx]
        self._pd = chosen.handle
        self._may_spin = chosen.kind != 3  # _instance's kind order: 3 = a CPU implementation
        device_info = self._query_device(chosen)
        if self.memory_mode == "auto":
            self.memory_mode = "device_local" if chosen.kind == 0 else "host_visible"
        laps.lap("queries")
        self.info = self._found  # known now, the memory mode too: ``info``'s waiters go on
        return chosen, device_info

    def _start(self, device: int | str | None, laps: StartupTimer) -> None:
        """A background start (on the opening thread): :meth:`_select`, then :meth:`_create_device`."""
        try:
            chosen, keep = self._select(device, laps)
        except BaseException as e:  # noqa: BLE001 - handed to the first user of the device
            self._open_error = e
            self._queried.fail(e)
            return
        self._create_device(chosen, keep)

    def _query_device(self, chosen: _Candidate) -> Any:
        """What the device offers (limits, memory types, fp16, extensions), as a DeviceInfo left in
        ``_found`` (:meth:`_select` publishes it as ``info`` once the memory mode is known too); returns
        the VkDeviceCreateInfo for :meth:`_create_device` with what it points to kept alive."""
        pd = self._pd
        props = vk.vkGetPhysicalDeviceProperties(pd)
        limits = props.limits
        self._max_groups = [int(n) for n in limits.maxComputeWorkGroupCount]
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
        self._timestamp_bits = int(families[chosen.queue_family].timestampValidBits)
        self._timestamp_ns = float(limits.timestampPeriod)
        mp = vk.vkGetPhysicalDeviceMemoryProperties(pd)
        self._mem_flags = [int(mp.memoryTypes[i].propertyFlags) for i in range(mp.memoryTypeCount)]
        self._uniform_align = max(int(limits.minUniformBufferOffsetAlignment), int(limits.minStorageBufferOffsetAlignment),
                                  16)
        # feature query chain: each struct named so the pNext pointers stay valid
        storage16 = vk.VkPhysicalDevice16BitStorageFeatures()
        float16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=storage16)
        features2 = vk.VkPhysicalDeviceFeatures2(pNext=float16)
        vk.vkGetPhysicalDeviceFeatures2(pd, features2)
        # 16-bit buffers alone carry the storage-only half kernels; with shaderFloat16 also half math
        fp16_storage = bool(storage16.storageBuffer16BitAccess)
        fp16 = bool(fp16_storage and float16.shaderFloat16)
        available = set(vk.vkEnumerateDeviceExtensionProperties(pd, None))
        ext_names = [e for e in _FP16_EXTENSIONS if e in available] if fp16_storage else []
        # enable exactly what fp16 kernels need (chained again, named for the same reason)
        want16 = vk.VkPhysicalDevice16BitStorageFeatures(storageBuffer16BitAccess=int(fp16_storage))
        want_f16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=want16, shaderFloat16=int(fp16))
        priorities = ffi.new("float[1]", [1.0])
        queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=chosen.queue_family, queueCount=1,
                                                pQueuePriorities=priorities)
        queue_infos = ffi.new("VkDeviceQueueCreateInfo[1]", [queue_info])
        ext_c = [ffi.new("char[]", e.encode()) for e in ext_names]
        ext_arr = ffi.new("char*[]", ext_c) if ext_c else ffi.NULL
        device_info = vk.VkDeviceCreateInfo(pNext=want_f16 if fp16_storage else None, queueCreateInfoCount=1,
                                            pQueueCreateInfos=queue_infos, enabledExtensionCount=len(ext_c),
                                            ppEnabledExtensionNames=ext_arr)
        v = props.apiVersion
        self._found = DeviceInfo(
            api="vulkan", name=chosen.name, vendor=_VENDORS.get(props.vendorID, hex(props.vendorID)),
            driver_version=f"{props.driverVersion} (Vulkan {v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF})",
            fp16=fp16, fp16_storage=fp16_storage, max_workgroup_size=int(limits.maxComputeWorkGroupInvocations),
            buffer_alignment=max(int(limits.minStorageBufferOffsetAlignment), 4), compute_units=1,
            max_buffer_bytes=int(limits.maxStorageBufferRange))
        # the create info and every struct and string its pointers reach, alive until the thread is done
        return (device_info, want16, want_f16, priorities, queue_info, queue_infos, ext_c, ext_arr)

    def _create_device(self, chosen: _Candidate, keep: Any) -> None:
        """vkCreateDevice, its queue, command pool and pipeline cache (on the device's opening thread)."""
        t0 = time.perf_counter()
        try:
            pd = self._pd
            try:
                handle = vk.vkCreateDevice(pd, keep[0], None)
            except (vk.VkError, vk.VkException) as e:
                raise BackendUnavailableError(f"vkCreateDevice on {chosen.name} failed: {type(e).__name__}") from e
            self._queue = vk.vkGetDeviceQueue(handle, chosen.queue_family, 0)
            pool_info = vk.VkCommandPoolCreateInfo(
                queueFamilyIndex=chosen.queue_family, flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT)
            self._pool = vk.vkCreateCommandPool(handle, pool_info, None)
            # one pipeline cache for the device: its data is what the serialization cache persists
            self._pipeline_cache = vk.vkCreatePipelineCache(handle, vk.VkPipelineCacheCreateInfo(), None)
            self._handle = handle
        except BaseException as e:  # noqa: BLE001 - handed to the first user of the device
            self._open_error = e
        finally:
            del keep
            self.device_open_ms = (time.perf_counter() - t0) * 1e3

    @property
    def _device(self) -> Any:
        """The VkDevice (None once closed); waits for :meth:`_create_device` on first use."""
        if self._opening is not None:
            t0 = time.perf_counter()
            self._opening.join()
            self._opening = None
            self.device_wait_ms = (time.perf_counter() - t0) * 1e3
        if self._open_error is not None:
            raise self._open_error
        return self._handle

    @_device.setter
    def _device(self, handle: Any) -> None:
        self._handle = handle

    @property
    def _xfer(self) -> _Recording:
        """The command buffer of uploads and synchronous transfers (made on first use)."""
        if self._xfer_rec is None:
            self._xfer_rec = _Recording(self, [])
        return self._xfer_rec

    @_xfer.setter
    def _xfer(self, rec: _Recording | None) -> None:
        self._xfer_rec = rec

    # -- allocator
    def _type_order(self, kind: str, type_bits: int) -> list[int]:
        """Memory type indices for ``kind`` allowed by ``type_bits``, best first.

        ``device`` in device_local mode: device-local, host-invisible first (a discrete GPU's
        mappable BAR heap is uncached for the host and kept out of the way).  ``device`` in
        host_visible mode: host-visible and coherent, device-local (UMA) and host-cached first.
        ``upload``: host-visible, coherent system memory first (the CPU writes it sequentially, the
        GPU copies it once).  ``input`` (a boundary input, :meth:`alloc_boundary`): host-visible and
        coherent, device-local (the mappable VRAM) first unless BOUNDARY_INPUT_MEMORY says "system".
        ``readback``: host-visible, coherent and host-*cached* first: the CPU reads it, and reads from
        uncached (write-combined or BAR) memory crawl at tens of MB/s."""
        flags = self._mem_flags
        ok = [i for i in range(len(flags)) if type_bits >> i & 1]
        if kind == "device" and self.memory_mode == "device_local":
            cands = [i for i in ok if flags[i] & _DL] or ok
            return sorted(cands, key=lambda i: bool(flags[i] & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
        cands = [i for i in ok if flags[i] & _HV == _HV]
        if not cands:
            raise DelegateError(f"{self.info.name}: no host-visible, coherent memory type for {kind} buffers")
        if kind == "device":
            return sorted(cands, key=lambda i: (not flags[i] & _DL, not flags[i] & _CACHED))
        if kind == "upload" or (kind == "input" and BOUNDARY_INPUT_MEMORY != "bar"):
            return sorted(cands, key=lambda i: (bool(flags[i] & _DL), bool(flags[i] & _CACHED)))
        if kind == "input":  # the launches read it where the host wrote it: VRAM when mappable
            return sorted(cands, key=lambda i: (not flags[i] & _DL, bool(flags[i] & _CACHED)))
        return sorted(cands, key=lambda i: (not flags[i] & _CACHED, bool(flags[i] & _DL)))

    def _suballoc(self, kind: str, size: int, align: int, type_bits: int) -> tuple[_Block, int]:
        """A ``size``-byte range of a memory block of ``kind``: bump allocation in the newest block
        of the best memory type, a new block when full: 4 MiB for the first of its type, each further one
        twice the last up to ``_BLOCK_BYTES`` (64 MiB), or the size when larger."""
        blocks = self._blocks.setdefault(kind, [])
        for t in self._type_order(kind, type_bits):
            for blk in reversed(blocks):
                if blk.type_index == t:
                    off = -(-blk.used // align) * align
                    if off + size <= blk.size:
                        blk.used, blk.live = off + size, blk.live + 1
                        blk.ends[off] = off + size
                        return blk, off
                    break
            try:
                grown = min(_BLOCK_BYTES, _FIRST_BLOCK_BYTES << sum(b.type_index == t for b in blocks))
                blk = _Block(self, t, max(size, grown), kind)
            except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory):  # e.g. a small mappable heap
                if kind == "input" and self._mem_flags[t] & _DL and not getattr(self, "_warned_bar", False):
                    self._warned_bar = True
                    log.warning("%s: the mappable VRAM is full: model inputs go to system memory instead (each "
                                "run's kernels then read them over the bus)", self.info.name)
                continue
            except (vk.VkError, vk.VkException) as e:
                raise DelegateError(f"{self.info.name}: vkAllocateMemory failed: {type(e).__name__}") from e
            blocks.append(blk)
            blk.used, blk.live = size, 1
            blk.ends[0] = size
            return blk, 0
        raise DelegateError(f"{self.info.name}: cannot allocate {size} bytes of {kind} memory")

    def _unref_block(self, blk: _Block, offset: int | None = None) -> None:
        blk.live -= 1
        if offset is not None and blk.ends.pop(offset, None) is not None:
            blk.used = max(blk.ends.values(), default=0)
        if blk.live > 0 or self._device is None:
            return
        if blk.host is not None:
            blk.host = None
            vk.vkUnmapMemory(self._device, blk.memory)
        vk.vkFreeMemory(self._device, blk.memory, None)
        blocks = self._blocks.get(blk.kind, [])
        if blk in blocks:
            blocks.remove(blk)

    def memory_report(self) -> list[dict[str, Any]]:
        """The live memory blocks: what for, bytes, bytes used and the memory type's property flags
        in words (benchmarks print it; ``describe()['memory']`` shows it per partition)."""
        return [{"kind": blk.kind, "bytes": blk.size, "used": blk.used, "type": blk.type_index,
                 "flags": _flag_words(blk.flags)} for kind in sorted(self._blocks) for blk in self._blocks[kind]]

    def alloc(self, nbytes: int) -> _Buffer:
        self._open()
        return _Buffer(self, max(int(nbytes), 16), "device")

    def alloc_boundary(self, nbytes: int, is_input: bool) -> _Buffer:
        """In device_local mode: an input in host-visible memory (HOST_BOUNDARY; the mappable VRAM
        first, BOUNDARY_INPUT_MEMORY), an output in host-cached memory (HOST_BOUNDARY_OUTPUTS), mapped,
        so an invoke writes or reads it with a memcpy and records no staging copy for it (:meth:`record`
        copies only buffers the host cannot map).  host_visible mode maps every buffer already."""
        self._open()
        if self.memory_mode != "device_local" or not (HOST_BOUNDARY if is_input else HOST_BOUNDARY_OUTPUTS):
            return self.alloc(nbytes)
        return _Buffer(self, max(int(nbytes), 16), "input" if is_input else "readback")

    def _params_ref(self, nbytes: int) -> BufferRef:
        """``nbytes`` of the shared params buffer (bump allocated; a full one, or one whose sets are
        all gone, is left to those that hold it and a new one started)."""
        align = self._uniform_align
        buf = self._params_buf() if self._params_buf is not None else None
        off = -(-self._params_used // align) * align
        if buf is None or off + nbytes > buf.nbytes:
            buf, off = _Buffer(self, max(_SHARED_BYTES, nbytes), "device"), 0
            self._params_buf = weakref.ref(buf)
        self._params_used = off + nbytes
        return BufferRef(buf, off, nbytes)

    def _staging_range(self, nbytes: int) -> BufferRef:
        """Staging for one queued upload: a range of the shared small-upload buffer (one per flush:
        :meth:`_flush_pending` lets it go once the copies are done), or a buffer of its own."""
        if nbytes > _SMALL_UPLOAD:
            return BufferRef(_Buffer(self, max(nbytes, 16), "upload"), 0, nbytes)
        off = -(-self._small_used // 16) * 16
        if self._small_staging is None or off + nbytes > self._small_staging.nbytes:
            self._small_staging, off = _Buffer(self, _SHARED_BYTES, "upload"), 0
        self._small_used = off + nbytes
        return BufferRef(self._small_staging, off, nbytes)

    def _staging_for(self, nbytes: int) -> _Buffer:
        """The reusable readback buffer of the synchronous download path (not the invoke path)."""
        if self._staging is None or self._staging.nbytes < nbytes:
            self._staging = None
            self._staging = _Buffer(self, 1 << max(int(nbytes) - 1, 15).bit_length(), "readback")
        return self._staging

    def _transfer(self, src: BufferRef, dst: BufferRef, nbytes: int) -> None:
        """Synchronous buffer copy on the transfer command buffer: downloads of buffers that no
        recorded readback covers (reading a DeviceValue, tests); never on the invoke path."""
        rec = self._xfer
        self._wait(rec)
        self._begin(rec, one_time=True)
        self._record_copy(rec.cmd, src, dst, nbytes)
        self._end(rec)
        rec.buffers = [src.buffer, dst.buffer]
        rec.buffer_ids = frozenset(map(id, rec.buffers))
        rec.writes_device = False
        self._submit(rec)
        self._wait(rec)

    def _flush_pending(self) -> None:
        """Submit the queued uploads into device memory (constants and params at prepare, an upload
        to an input no recording covers) as one command buffer, and wait."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        rec = self._xfer
        self._wait(rec)
        self._begin(rec, one_time=True)
        cmd = rec.cmd
        _barrier(cmd, _COMPUTE | _TRANSFER, _WRITES, _TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        done: list[tuple[int, int, int]] = []
        for src, dst, n in pending:
            span = [(id(dst.buffer), dst.offset, dst.offset + n)]
            if _overlaps(span, done):  # two uploads into the same bytes: keep their order
                _barrier(cmd, _TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT, _TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT)
                done = []
            done += span
            vk.vkCmdCopyBuffer(cmd, src.buffer.handle, dst.buffer.handle, 1,
                               vk.VkBufferCopy(srcOffset=src.offset, dstOffset=dst.offset, size=n))
        _barrier(cmd, _TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                 _COMPUTE | _TRANSFER | vk.VK_PIPELINE_STAGE_HOST_BIT, _READS | _WRITES)
        self._end(rec)
        rec.buffers = [b for src, dst, _n in pending for b in (src.buffer, dst.buffer)]
        rec.buffer_ids = frozenset(map(id, rec.buffers))
        rec.writes_device = True
        self._submit(rec)
        self._wait(rec)
        # every copy out of the staging is done: it goes back to its block (with the shared small-upload
        # buffer: a device keeps no memory between prepares, issue 19)
        self._small_staging, self._small_used = None, 0
        del pending

    upload_copies = True  # into the mapped staging memory or the host-visible buffer

    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        self._open()
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        n = min(raw.size, ref.nbytes)
        buf: _Buffer = ref.buffer
        shadow = buf.shadows.get(ref.offset)
        if shadow is not None and n <= shadow.nbytes:  # a recorded boundary input: the replay copies it
            self._wait_for(shadow)  # the previous submission may still copy out of it
            shadow.host[:n] = raw[:n]
            self._dirty[id(shadow)] = (shadow, ref)
            return
        self._wait_for(buf)  # the GPU may still read or write it
        if buf.host is not None:
            buf.host[ref.offset:ref.offset + n] = raw[:n]
            return
        staging = self._staging_range(n)
        staging.buffer.host[staging.offset:staging.offset + n] = raw[:n]
        self._pending.append((staging, ref, n))

    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:  # a reshape would copy and the data would land in the copy
            raise DelegateError("download needs a C-contiguous host array")
        self._open()
        flat = out.reshape(-1).view(np.uint8)
        n = min(flat.size, ref.nbytes)
        readback = ref.buffer.readbacks.get(ref.offset)
        if readback is not None and readback in self._fresh:  # the last replay copied it out already
            self._wait_for(readback)
            flat[:n] = readback.host[:n]
            return
        self._flush_pending()
        buf: _Buffer = ref.buffer
        self._wait_for(buf)
        if buf.host is not None:
            flat[:n] = buf.host[ref.offset:ref.offset + n]
            return
        staging = self._staging_for(n)
        self._transfer(ref, BufferRef(staging, 0, n), n)
        flat[:n] = staging.host[:n]

    def download_many(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> None:
        # one fence wait covers every read: the recorded readbacks ran in the same submission
        self.finish()
        for ref, out in items:
            self.download(ref, out)

    # -- asynchronous reads: the token is the latest submission (a replay and the copies after it);
    # its fence covers everything submitted before it on the queue and nothing after, so waiting for
    # run 1 does not wait for run 2.  The recorded readbacks are this kernel's own (a kernel is not
    # replayed again before its run is completed), so the reads are one memcpy each.
    def read_async(self, items: Sequence[tuple[BufferRef, np.ndarray]]) -> Any:
        return self._last, list(items)

    def wait_reads(self, token: Any) -> None:
        rec, items = token
        self._wait(rec)
        for ref, out in items:
            rb = ref.buffer.readbacks.get(ref.offset)
            if rb is not None and out.flags.c_contiguous:  # every replay of the recording fills it
                flat = out.reshape(-1).view(np.uint8)
                n = min(flat.size, ref.nbytes)
                flat[:n] = rb.host[:n]
            else:  # no recorded readback of it in that submission (host-visible memory, or a plain copy)
                self.download(ref, out)

    def reads_done(self, token: Any) -> bool:
        rec = token[0]
        if rec is None or not rec.pending or self._device is None:
            return True
        return vk.lib.vkGetFenceStatus(self._device, rec.fence) == vk.VK_SUCCESS

    def copy(self, src: BufferRef, dst: BufferRef) -> None:
        # recorded once per (src, dst) pair and resubmitted: the executor copies the same refs each invoke
        self._open()
        key = (id(src.buffer), src.offset, dst.offset, min(src.nbytes, dst.nbytes))
        rec = dst.buffer.copies.get(key)
        if rec is None:
            rec = _Recording(self, [src.buffer, dst.buffer])
            self._begin(rec)
            self._record_copy(rec.cmd, src, dst, key[3])
            self._end(rec)
            dst.buffer.copies[key] = rec
        self._submit(rec)

    def _record_copy(self, cmd: Any, src: BufferRef, dst: BufferRef, nbytes: int) -> None:
        # access masks must match their stages exactly (VUID-vkCmdPipelineBarrier-*AccessMask-0281x)
        _barrier(cmd, _COMPUTE | _TRANSFER, _WRITES, _TRANSFER,
                 vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        region = vk.VkBufferCopy(srcOffset=src.offset, dstOffset=dst.offset, size=nbytes)
        vk.vkCmdCopyBuffer(cmd, src.buffer.handle, dst.buffer.handle, 1, region)
        _barrier(cmd, _TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                 _COMPUTE | _TRANSFER | vk.VK_PIPELINE_STAGE_HOST_BIT, _READS | _WRITES)

    # -- compiler / program
    def _compile_spirv(self, kernel: RenderedKernel) -> bytes:
        try:
            return compile_spirv(kernel.source, compiler=self.compiler, vulkan="vulkan1.1")
        except FileNotFoundError as e:
            raise BackendUnavailableError(str(e)) from e
        except Exception as e:  # the compiler's message names the line
            raise DelegateError(f"SPIR-V compile of kernel {kernel.name} failed: {e}") from e

    def _spirv_future(self, kernel: RenderedKernel) -> Future[bytes]:
        """The SPIR-V of ``kernel.source``, compiled once per device on the thread pool (glslc is
        a process of its own: the compiles of a partition run side by side)."""
        fut = self._spirv.get(kernel.source)
        if fut is None:
            fut = self._spirv[kernel.source] = self._executor().submit(self._compile_spirv, kernel)
        return fut

    def _executor(self) -> ThreadPoolExecutor:
        """The device's thread pool (made on first use): glslc processes and pipeline creation."""
        if self._pool_exec is None:
            self._pool_exec = ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1),
                                                 thread_name_prefix="litegpu-glslc")
        return self._pool_exec

    def compile(self, kernel: RenderedKernel) -> _Program:
        self._open()
        prog = self._programs.get(kernel.source)
        if prog is None:
            if "f16" in kernel.features and not self.info.fp16:
                raise DelegateError(f"{self.info.name} has no shaderFloat16/storageBuffer16BitAccess: "
                                    "use precision fp32")
            if "f16_storage" in kernel.features and not self.info.fp16_storage:
                raise DelegateError(f"{self.info.name} has no storageBuffer16BitAccess: use precision fp32")
            prog = _Program(self, kernel, self._spirv_future(kernel))
            self._programs[kernel.source] = prog
            if EARLY_PIPELINES:
                prog.start_early()
        return prog

    def _create_pipelines(self, programs: Sequence[_Program]) -> None:
        """Pipelines for every program in ``programs`` that has none yet: one
        vkCreateComputePipelines call for all of them, through the device's pipeline cache."""
        for p in {id(p): p for p in programs}.values():
            if p._early is not None:  # created (or tried) on the compile's thread: wait for that
                p._early.wait()
        todo = [p for p in {id(p): p for p in programs}.values() if p.pipeline is None]
        if not todo:
            return
        self._open()
        for p in todo:  # waits for the SPIR-V compiles (all running already)
            if p.module is None:
                p._create_module()
        n = len(todo)
        # several calls side by side on the glslc pool's threads (cffi drops the GIL; the pipeline
        # cache is internally synchronised): drivers that compile each pipeline of one call in turn
        # (lavapipe's LLVM) then use every core
        chunks = min(n, min(16, os.cpu_count() or 1))
        parts = [todo[i::chunks] for i in range(chunks)]
        if chunks > 1:
            results = list(self._executor().map(self._create_pipeline_batch, parts))
        else:
            results = [self._create_pipeline_batch(todo)]
        bad = [p.name for part, res in zip(parts, results, strict=True) if res != vk.VK_SUCCESS for p in part
               if p.pipeline is None]
        if any(res != vk.VK_SUCCESS for res in results):
            codes = sorted({res for res in results if res != vk.VK_SUCCESS})
            raise DelegateError(f"vkCreateComputePipelines failed ({', '.join(map(str, codes))}) for kernels "
                                f"{', '.join(bad) or '?'}")
        self.pipeline_batches += 1

    def _create_pipeline_batch(self, todo: Sequence[_Program]) -> int:
        """One vkCreateComputePipelines call for ``todo`` (modules created); returns its VkResult.
        Counts what it created in ``pipelines_created`` (from any thread)."""
        d = self._open()
        n = len(todo)
        # keep-alive: the entry-point strings and the info array are ours (module docstring)
        entries = [ffi.new("char[]", p.entry.encode()) for p in todo]
        infos = ffi.new("VkComputePipelineCreateInfo[]", n)
        for i, p in enumerate(todo):
            infos[i].sType = vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
            infos[i].stage.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
            infos[i].stage.stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
            infos[i].stage.module = p.module
            infos[i].stage.pName = entries[i]
            infos[i].layout = p.layout
            infos[i].basePipelineIndex = -1
        out = ffi.new("VkPipeline[]", n)
        res = vk.lib.vkCreateComputePipelines(d, self._pipeline_cache, n, infos, ffi.NULL, out)
        made = 0
        for i, p in enumerate(todo):
            if out[i] != ffi.NULL:
                p.pipeline = out[i]
                p._on_release(vk.vkDestroyPipeline, d, p.pipeline, None)
                made += 1
        with self._count_lock:
            self.pipelines_created += made
        del entries, infos
        return int(res)

    _MAGIC = b"LGVK2\0"

    def program_binary(self, program: _Program) -> bytes | None:
        """The SPIR-V (skips glslc); the driver's compiled pipelines go in :meth:`cache_blob`."""
        return self._MAGIC + program.spirv

    def prefetch_programs(self, programs: Sequence[tuple[RenderedKernel, bytes]],
                          cache_blob: bytes | None = None) -> None:
        """A warm start's programs rebuilt on the device's pool (:meth:`program_from_binary` there, which
        waits for the device's start), each pipeline right after (WARM_EARLY_PIPELINES), while the
        caller packs and uploads the partition's weights; the caller's :meth:`program_from_binary`
        then takes the one made here.  ``cache_blob`` (the pipeline cache's data) is merged first:
        ``vkMergePipelineCaches`` must not overlap a pipeline's creation through the same cache (the
        Khronos layer reports it), and a pipeline made before it would not find its cached binary."""
        if not WARM_PREFETCH:
            return
        todo: list[tuple[RenderedKernel, bytes, Future[_Program | None]]] = []
        for kernel, binary in programs:
            if kernel.source not in self._programs and kernel.source not in self._prefetched:
                fut: Future[_Program | None] = Future()
                self._prefetched[kernel.source] = fut
                todo.append((kernel, binary, fut))
        if todo:
            self._executor().submit(self._prefetch, todo, cache_blob)

    def _prefetch(self, todo: Sequence[tuple[RenderedKernel, bytes, Future[_Program | None]]],
                  cache_blob: bytes | None) -> None:
        """On the pool: the pipeline cache's data, then one task per program (see prefetch_programs)."""
        if cache_blob:
            try:
                self.load_cache_blob(cache_blob)
            except Exception:  # noqa: BLE001, S110 - the caller's own load_cache_blob meets it again
                pass
        for kernel, binary, fut in todo:
            self._executor().submit(self._fill, fut, kernel, binary)

    def _fill(self, fut: Future[_Program | None], kernel: RenderedKernel, binary: bytes) -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(self._program_from_binary(kernel, binary))
        except BaseException as e:  # noqa: BLE001 - handed to the caller's program_from_binary
            fut.set_exception(e)

    def program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> _Program | None:
        begun = self._prefetched.pop(kernel.source, None)
        if begun is not None:
            return begun.result()  # re-raises what the pool met (the device's failed start, say)
        return self._program_from_binary(kernel, binary)

    def _program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> _Program | None:
        self._open()
        held = self._programs.get(kernel.source)
        if held is not None:
            # Already on this device (an earlier interpreter of the same model): a new _Program
            # replaced it here and made lavapipe compile a new pipeline per interpreter, memory the
            # driver kept after the interpreter was dropped (+30% RSS over 50 lifetimes, issue 19).
            return held
        m = len(self._MAGIC)
        spirv = binary[m:]
        if binary[:m] != self._MAGIC or not spirv or len(spirv) % 4 or spirv[:4] != b"\x03\x02\x23\x07":
            return None
        prog = _Program(self, kernel, spirv)
        self._programs[kernel.source] = prog
        done: Future[bytes] = Future()
        done.set_result(spirv)
        self._spirv[kernel.source] = done
        if WARM_EARLY_PIPELINES:
            prog.start_early()
        return prog

    def cache_blob(self) -> bytes | None:
        """The device's VkPipelineCache data: the driver's compiled pipelines (persisted by the
        serialization cache; a warm prepare then compiles nothing)."""
        d = self._open()
        size = ffi.new("size_t*")
        if vk.lib.vkGetPipelineCacheData(d, self._pipeline_cache, size, ffi.NULL) != vk.VK_SUCCESS or not size[0]:
            return None
        data = ffi.new("char[]", size[0])
        if vk.lib.vkGetPipelineCacheData(d, self._pipeline_cache, size, data) != vk.VK_SUCCESS:
            return None
        return bytes(ffi.buffer(data, size[0]))

    def load_cache_blob(self, blob: bytes) -> None:
        """Merge :meth:`cache_blob` data of an earlier run into the pipeline cache.  The driver
        checks the header (vendor, device, pipeline-cache UUID) and ignores data of another device
        or driver version by itself."""
        d = self._open()
        with self._blob_lock:  # prefetch_programs may load it on the pool: merged once, never twice at once
            self._load_cache_blob(d, blob)

    def _load_cache_blob(self, d: Any, blob: bytes) -> None:
        if not blob or blob in self._loaded_blobs:
            return
        raw = ffi.from_buffer(blob)
        info = vk.VkPipelineCacheCreateInfo(initialDataSize=len(blob), pInitialData=raw)
        try:
            tmp = vk.vkCreatePipelineCache(d, info, None)
        except (vk.VkError, vk.VkException):
            return  # unusable data: pipelines are compiled afresh
        try:
            srcs = ffi.new("VkPipelineCache[1]", [tmp])
            vk.lib.vkMergePipelineCaches(d, self._pipeline_cache, 1, srcs)
        finally:
            vk.vkDestroyPipelineCache(d, tmp, None)
        self._loaded_blobs.add(blob)
        del raw, info

    def bind(self, program: _Program, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> _Bound:
        self._open()
        return _Bound(self, program, kernel, buffers, params)

    def _allocate_sets(self, bounds: Sequence[_Bound]) -> None:
        """The descriptor sets of those of ``bounds`` that have none yet, from one new pool."""
        todo = list({id(b): b for b in bounds if b.set is None}.values())
        if todo:
            _SetPool(self, todo)

    # -- recording and submission
    def _begin(self, rec: _Recording, one_time: bool = False) -> None:
        flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT if one_time else 0
        vk.vkBeginCommandBuffer(rec.cmd, vk.VkCommandBufferBeginInfo(flags=flags))

    def _end(self, rec: _Recording) -> None:
        _vk_call("vkEndCommandBuffer", vk.vkEndCommandBuffer, rec.cmd)

    def _shadow_for(self, ref: BufferRef) -> _Buffer:
        """The persistently mapped upload buffer of boundary input ``ref`` (zeroed: a direct-mode
        input writes only its leading bytes, the padding lanes stay zero)."""
        shadow = ref.buffer.shadows.get(ref.offset)
        if shadow is None or shadow.nbytes < ref.nbytes:
            shadow = ref.buffer.shadows[ref.offset] = _Buffer(self, max(ref.nbytes, 16), "upload")
            shadow.host[:] = 0
        return shadow

    def _readback_for(self, ref: BufferRef) -> _Buffer:
        rb = ref.buffer.readbacks.get(ref.offset)
        if rb is None or rb.nbytes < ref.nbytes:
            rb = ref.buffer.readbacks[ref.offset] = _Buffer(self, max(ref.nbytes, 16), "readback")
            rb.source_id = id(ref.buffer)
        return rb

    def record(self, launches: Sequence[tuple[_Bound, RenderedKernel, tuple[int, int, int]]],
               uploads: Sequence[BufferRef] = (), downloads: Sequence[BufferRef] = (), *,
               profile: bool = False) -> _Recording:
        """One command buffer for a whole invoke: the copies of ``uploads`` out of their persistently
        mapped staging buffers, every launch (a barrier only where a launch touches what an earlier
        one wrote, or writes what it read), the copies of ``downloads`` into host-cached readback
        buffers.  Buffers that are host-visible themselves need no copy (lavapipe, integrated GPUs).

        ``profile``: a timestamp before and after every copy and launch, and a barrier after each so
        that they run one at a time (what OpenCL's in-order profiling queue measures); read them
        with :meth:`timestamps` after a replay and :meth:`finish`."""
        self._open()
        self._create_pipelines([bound.program for bound, _k, _g in launches])
        self._allocate_sets([bound for bound, _k, _g in launches])
        ups = [(self._shadow_for(r), r) for r in uploads if r.buffer.host is None]
        downs = [(r, self._readback_for(r)) for r in downloads if r.buffer.host is None]
        rec = _Recording(self, [u[1] for bound, _k, _g in launches for u in bound.uses]
                         + [b for s, r in ups for b in (s, r.buffer)] + [b for r, rb in downs for b in (r.buffer, rb)],
                         keep=[bound for bound, _k, _g in launches])
        rec.upload_keys = frozenset(id(s) for s, _r in ups)
        rec.readbacks = [rb for _r, rb in downs]
        self._begin(rec)
        n_marks = 2 * (len(ups) + len(launches) + len(downs))
        if profile:
            if not self._timestamp_bits:
                raise DelegateError(f"{self.info.name}: the compute queue has no timestamps")
            info = vk.VkQueryPoolCreateInfo(queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=max(n_marks, 1))
            rec.query_pool = vk.vkCreateQueryPool(self._device, info, None)
            rec._on_release(vk.vkDestroyQueryPool, self._device, rec.query_pool, None)
            vk.vkCmdResetQueryPool(rec.cmd, rec.query_pool, 0, max(n_marks, 1))
        self._record_run(rec, rec.cmd, [(s, 0, r.buffer, r.offset, r.nbytes) for s, r in ups], launches,
                         [(r.buffer, r.offset, rb, 0, r.nbytes) for r, rb in downs], profile)
        self._end(rec)
        self._flush_pending()  # the weights and params uploaded at prepare: now, not in the first invoke
        return rec

    def record_runs(self, launches: Sequence[tuple[_Bound, RenderedKernel, tuple[int, int, int]]],
                    uploads: Sequence[BufferRef], downloads: Sequence[BufferRef], capacity: int) -> RunStaging:
        """``capacity`` command buffers, one run each: run ``i`` copies its inputs out of row ``i`` of
        one persistently mapped upload buffer per input, launches, and copies its outputs into row ``i``
        of one host-cached readback buffer per output (always through staging, also where the tensors
        are host-visible: the runs of one submission share the tensors).  :meth:`replay_runs` submits
        the first few in one ``vkQueueSubmit`` under one fence: the host writes and reads the rows with
        one copy per tensor, and waits once, for all of them."""
        self._open()
        if capacity < 1:
            raise DelegateError(f"record_runs needs a capacity >= 1, got {capacity}")
        self._create_pipelines([bound.program for bound, _k, _g in launches])
        self._allocate_sets([bound for bound, _k, _g in launches])
        ins = [_Buffer(self, max(capacity * r.nbytes, 16), "upload") for r in uploads]
        outs = [_Buffer(self, max(capacity * r.nbytes, 16), "readback") for r in downloads]
        for b in ins:  # a direct-mode input's host rows fill only their leading bytes: zero padding lanes
            b.host[:] = 0
        rec = _Recording(self, [u[1] for bound, _k, _g in launches for u in bound.uses]
                         + ins + outs + [r.buffer for r in (*uploads, *downloads)],
                         keep=[bound for bound, _k, _g in launches], count=capacity)
        ups, downs = list(zip(ins, uploads, strict=True)), list(zip(outs, downloads, strict=True))
        for i, cmd in enumerate(rec.cmds):
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(flags=0))
            self._record_run(rec, cmd, [(b, i * r.nbytes, r.buffer, r.offset, r.nbytes) for b, r in ups], launches,
                             [(r.buffer, r.offset, b, i * r.nbytes, r.nbytes) for b, r in downs], False)
            _vk_call("vkEndCommandBuffer", vk.vkEndCommandBuffer, cmd)
        self._flush_pending()
        return RunStaging(rec, capacity, [b.host[:capacity * r.nbytes].reshape(capacity, r.nbytes) for b, r in ups],
                          [b.host[:capacity * r.nbytes].reshape(capacity, r.nbytes) for b, r in downs])

    def replay_runs(self, staging: RunStaging, runs: int) -> Any:
        if not 1 <= runs <= staging.capacity:
            raise DelegateError(f"replay_runs: {runs} runs for a recording of {staging.capacity}")
        self._queue_dirty(frozenset())
        self._submit(staging.recording, runs)
        return staging.recording, []  # a read_async token: wait_reads / reads_done wait for the fence

    def _record_run(self, rec: _Recording, cmd: Any, ups: Sequence[tuple[_Buffer, int, _Buffer, int, int]],
                    launches: Sequence[tuple[_Bound, RenderedKernel, tuple[int, int, int]]],
                    downs: Sequence[tuple[_Buffer, int, _Buffer, int, int]], profile: bool) -> None:
        """One run's commands into ``cmd``: the upload copies ``(src, offset, dst, offset, bytes)``, the
        launches, the download copies."""
        limits = self._max_groups

        def barrier(src_stage: int, src_access: int, dst_stage: int, dst_access: int) -> None:
            _barrier(cmd, src_stage, src_access, dst_stage, dst_access)
            rec.barriers += 1

        def timed(label: tuple[str, int], fn: Any) -> None:
            if not profile:
                fn()
                return
            q = len(rec.labels) * 2
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, rec.query_pool, q)
            fn()
            vk.vkCmdWriteTimestamp(cmd, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, rec.query_pool, q + 1)
            rec.labels.append(label)
            barrier(_COMPUTE | _TRANSFER, _WRITES, _COMPUTE | _TRANSFER, _SHADER_RW | vk.VK_ACCESS_UNIFORM_READ_BIT
                    | vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)

        def copy(src: _Buffer, src_off: int, dst: _Buffer, dst_off: int, n: int) -> Any:
            return lambda: vk.vkCmdCopyBuffer(cmd, src.handle, dst.handle, 1,
                                              vk.VkBufferCopy(srcOffset=src_off, dstOffset=dst_off, size=n))

        # Earlier submissions and command buffers (the previous run, another partition, device copies)
        # write what we read, or read what we write: one barrier orders them before this run.
        barrier(_COMPUTE | _TRANSFER, _WRITES, _COMPUTE | _TRANSFER,
                _SHADER_RW | vk.VK_ACCESS_UNIFORM_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        for i, up in enumerate(ups):
            timed(("upload", i), copy(*up))
            rec.copies += 1
        if ups:
            barrier(_TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT, _COMPUTE, _SHADER_RW)
        reads: list[tuple[int, int, int]] = []
        writes: list[tuple[int, int, int]] = []
        pipeline = None
        for i, (bound, kernel, grid) in enumerate(launches):
            groups = [-(-int(g) // w) for g, w in zip(grid, kernel.workgroup, strict=True)]
            if any(n > lim for n, lim in zip(groups, limits, strict=True)):
                raise DelegateError(f"kernel {kernel.name}: {groups} work groups exceed the device's {limits}")
            mine_r = [(id(b), lo, hi) for _i, b, lo, hi, w in bound.uses if not w]
            mine_w = [(id(b), lo, hi) for _i, b, lo, hi, w in bound.uses if w]
            # read-after-write, write-after-write and write-after-read hazards on the byte ranges
            # since the last barrier; independent launches (branches of the graph) share one
            if not profile and (_overlaps(mine_r + mine_w, writes) or _overlaps(mine_w, reads)):
                barrier(_COMPUTE, vk.VK_ACCESS_SHADER_WRITE_BIT, _COMPUTE, _SHADER_RW)
                reads, writes = [], []
            reads += mine_r
            writes += mine_w
            prog = bound.program
            if prog.pipeline is not pipeline:
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, prog.pipeline)
                pipeline = prog.pipeline
            sets = ffi.new("VkDescriptorSet[1]", [bound.set])
            vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, prog.layout, 0, 1, sets, 0, None)
            timed(("dispatch", i), lambda groups=groups: vk.vkCmdDispatch(cmd, *groups))
            rec.dispatches += 1
        # results become visible to the readback copies, later submissions and the host
        barrier(_COMPUTE, vk.VK_ACCESS_SHADER_WRITE_BIT, _COMPUTE | _TRANSFER | vk.VK_PIPELINE_STAGE_HOST_BIT,
                _READS | _SHADER_RW)
        for i, down in enumerate(downs):
            timed(("download", i), copy(*down))
            rec.copies += 1
        if downs:
            barrier(_TRANSFER, vk.VK_ACCESS_TRANSFER_WRITE_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                    vk.VK_ACCESS_HOST_READ_BIT)

    def recording_stats(self, rec: _Recording) -> dict[str, int]:
        """What one replay of ``rec`` costs in API terms (``describe()['recording']``)."""
        return {"submits": 1, "fence_waits": 1, "dispatches": rec.dispatches, "barriers": rec.barriers,
                "copies": rec.copies, "staged_uploads": len(rec.upload_keys),
                "staged_downloads": len(rec.readbacks)}

    @property
    def profile_source(self) -> str:  # type: ignore[override]
        if not self._timestamp_bits:
            return GpuDevice.profile_source + f" ({self.info.name}: the compute queue has no timestamps)"
        return ("GPU: Vulkan timestamp queries around each dispatch of one command buffer, a barrier after "
                "each (one at a time)")

    def profile_launches(self, launches: Sequence[tuple[Any, RenderedKernel, tuple[int, int, int]]],
                         runs: int = 10) -> list[float]:
        """Each launch's GPU time from timestamps (a ``profile=True`` recording, replayed ``runs``
        times); without timestamp support on the queue, the host-timed default."""
        if not self._timestamp_bits:
            return super().profile_launches(launches, runs)
        self.finish()
        rec = self.record(launches, profile=True)
        samples: list[list[float]] = [[] for _ in launches]
        for _ in range(max(1, runs)):
            self.replay(rec)
            self.finish()
            for what, i, us in self.timestamps(rec):
                if what == "dispatch":
                    samples[i].append(us)
        return [float(np.median(s)) if s else float("nan") for s in samples]

    def timestamps(self, rec: _Recording) -> list[tuple[str, int, float]]:
        """``(what, index, microseconds)`` per copy and launch of a ``profile=True`` recording's
        latest replay (``what``: upload, dispatch, download; index into that list)."""
        self._wait(rec)
        n = 2 * len(rec.labels)
        if rec.query_pool is None or not n:
            return []
        data = ffi.new("uint64_t[]", n)
        res = vk.lib.vkGetQueryPoolResults(self._device, rec.query_pool, 0, n, n * 8, data, 8,
                                           vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT)
        if res != vk.VK_SUCCESS:
            raise DelegateError(f"{self.info.name}: vkGetQueryPoolResults failed ({res})")
        mask = (1 << self._timestamp_bits) - 1 if self._timestamp_bits < 64 else (1 << 64) - 1
        return [(what, i, ((data[2 * j + 1] - data[2 * j]) & mask) * self._timestamp_ns * 1e-3)
                for j, (what, i) in enumerate(rec.labels)]

    def replay(self, rec: _Recording) -> None:
        """Submit a partition's command buffer from :meth:`record` once more (no host wait).

        Boundary inputs written since the last replay that this recording does not copy (an input
        a DeviceValue fed last time) are copied first, in a submission of their own."""
        self._queue_dirty(rec.upload_keys)
        self._submit(rec)

    def _queue_dirty(self, skip: frozenset[int]) -> None:
        """Queue the copies of the upload buffers written since the last replay, but those in ``skip``
        (the submission copies them itself)."""
        for key, (shadow, ref) in list(self._dirty.items()):
            if key not in skip:
                self._pending.append((BufferRef(shadow, 0, ref.nbytes), ref, ref.nbytes))
        self._dirty.clear()

    def _submit(self, rec: _Recording, count: int = 1) -> None:
        device = self._open()
        if rec is not self._xfer:
            self._flush_pending()
        self._wait(rec)  # a command buffer is resubmitted only after its previous run ended
        lib = vk.lib
        if RESET_BESIDE:  # submit with the spare (reset during the previous run), reset the other after
            i = rec.spare
            res = vk.VK_SUCCESS if rec.spare_ready else lib.vkResetFences(device, 1, rec._fence_arrays[i])
            if res == vk.VK_SUCCESS:
                res = lib.vkQueueSubmit(self._queue, 1, rec.submit_ptr_for(count), rec._fence_pair[i])
            if res == vk.VK_SUCCESS:
                old = rec.fences
                rec.fence, rec.fences, rec.spare = rec._fence_pair[i], rec._fence_arrays[i], 1 - i
                # the previous submission's fence, waited for above: reset while this run is on the GPU
                rec.spare_ready = lib.vkResetFences(device, 1, old) == vk.VK_SUCCESS
        else:
            res = lib.vkResetFences(device, 1, rec.fences)
            if res == vk.VK_SUCCESS:
                res = lib.vkQueueSubmit(self._queue, 1, rec.submit_ptr_for(count), rec.fence)
        if res != vk.VK_SUCCESS:
            name = getattr(vk.exception_codes.get(res), "__name__", str(res))
            raise DelegateError(f"{self.info.name}: vkQueueSubmit failed: {name} ({res})")
        rec.pending = True
        for b in rec.buffers:
            b.busy = rec
        self._last = rec
        if rec.writes_device:  # readbacks of buffers it touches are stale, the ones it fills current
            touched = rec.buffer_ids
            self._fresh = weakref.WeakSet([rb for rb in self._fresh if rb.source_id not in touched]
                                          + list(rec.readbacks))

    def launch(self, bound: _Bound, kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        """One launch on its own (slow path: the executor records whole partitions with :meth:`record`)."""
        rec = self.record([(bound, kernel, grid)])
        self._submit(rec)
        self._wait(rec)

    def _wait(self, rec: _Recording | None) -> None:
        if rec is None or not rec.pending or self._device is None:
            return
        d = self._device
        spin = FENCE_SPIN_US
        if spin > 0 and self._may_spin:
            # poll first: a blocked vkWaitForFences returns some time after the GPU signalled
            end = time.perf_counter() + spin * 1e-6
            status, fence, now = vk.lib.vkGetFenceStatus, rec.fence, time.perf_counter
            while status(d, fence) == vk.VK_NOT_READY and now() < end:
                pass
        res = vk.lib.vkWaitForFences(d, 1, rec.fences, vk.VK_TRUE, self._timeout_ns)
        if res == vk.VK_TIMEOUT:
            raise DelegateError(f"{self.info.name}: GPU work did not finish within "
                                f"{self._timeout_ns / 1e9:g} s (fence_timeout)")
        if res != vk.VK_SUCCESS:
            name = getattr(vk.exception_codes.get(res), "__name__", str(res))
            raise DelegateError(f"{self.info.name}: waiting for the GPU failed: {name}")
        rec.pending = False
        if rec is self._last:
            # all submitted work is done: holding the recording would keep its buffers (a dropped
            # interpreter's whole working set) bound into the memory block until the next
            # interpreter had placed its own above them (issue 19: +23% RSS over 50 lifetimes)
            self._last = None

    def _wait_for(self, buf: _Buffer) -> None:
        # a fence covers everything submitted before it, so the buffer's last user is enough
        self._wait(buf.busy)
        buf.busy = None

    def finish(self) -> None:
        self._wait(self._last)

    def _open(self) -> Any:
        """The VkDevice; a closed device raises instead of handing the driver a NULL handle (a crash)."""
        if self._device is None:
            raise DelegateError("the Vulkan device is closed (its delegate was closed)")
        return self._device

    # -- teardown
    def close(self) -> None:
        if self._opening is not None:  # still being created: let that finish, then undo it
            self._opening.join()
            self._opening = None
        if self._handle is None:
            return
        if self._pool_exec is not None:  # its threads create pipelines (start_early): done before teardown
            self._pool_exec.shutdown(wait=True, cancel_futures=True)
            self._pool_exec = None
        try:
            vk.vkDeviceWaitIdle(self._device)
        finally:
            for undo in list(self._owned.values()):
                try:
                    _run_undo(undo)
                except Exception:  # keep going: the device is destroyed anyway
                    pass
            self._owned.clear()
            self._programs.clear()
            self._prefetched.clear()
            self._staging = self._xfer = self._last = self._params_buf = self._small_staging = None
            self._pending, self._dirty, self._fresh = [], {}, weakref.WeakSet()
            for blocks in self._blocks.values():  # normally freed with their last buffer already
                for blk in blocks:
                    vk.vkFreeMemory(self._device, blk.memory, None)
            self._blocks.clear()
            if self._pool_exec is not None:
                self._pool_exec.shutdown(wait=True, cancel_futures=True)
                self._pool_exec = None
            vk.vkDestroyPipelineCache(self._device, self._pipeline_cache, None)
            vk.vkDestroyCommandPool(self._device, self._pool, None)
            vk.vkDestroyDevice(self._device, None)
            self._device = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_FLAG_WORDS = ((vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "device-local"),
               (vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "host-visible"),
               (vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "coherent"),
               (vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "cached"))


def _flag_words(flags: int) -> str:
    return "+".join(w for bit, w in _FLAG_WORDS if flags & bit) or "none"


def _overlaps(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> bool:
    return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] for x in a for y in b)
