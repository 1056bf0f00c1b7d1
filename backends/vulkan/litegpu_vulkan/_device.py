"""Vulkan through the ``vulkan`` cffi binding: device selection, allocator, compiler, program, queue.

The whole API-specific part of the backend; the core's GPU executor does the rest.  One
instance, one logical device, one compute queue.  A partition's launches are recorded once into
one command buffer (:meth:`VulkanDevice.record`) and resubmitted with a fence per invoke
(:meth:`VulkanDevice.replay`).

Keep-alive rule (why so many names below): the ``vulkan`` binding keeps the temporaries it makes
for a pointer field (a ``char[]`` for a string, an array for a list) alive only as long as the
struct that points at them, through a weak-keyed dict.  A struct nested *by value* (the shader
stage inside VkComputePipelineCreateInfo) is copied, and the copy does not keep the original's
temporaries; a list of structs is copied into a fresh array the same way.  Unnamed temporaries
are then freed before the driver reads them: lavapipe happens to survive it, NVIDIA fails with
VK_ERROR_UNKNOWN or garbage.  So every string, nested struct and array handed to a create call
is a named variable (or an ``ffi.new`` we own) that lives until the call returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import vulkan as vk
from litegpu import BackendUnavailableError, DelegateError
from litegpu.gpu._device import BufferRef, DeviceInfo, GpuDevice
from litegpu.gpu.spirv import compile_spirv, find_glsl_compiler

if TYPE_CHECKING:
    from litegpu.gpu.kernels import RenderedKernel

__all__ = ["VulkanDevice", "list_devices", "MEMORY_MODES"]

ffi = vk.ffi
_API_1_1 = vk.VK_MAKE_VERSION(1, 1, 0)
_TYPE_ORDER = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1,
               vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: 2, vk.VK_PHYSICAL_DEVICE_TYPE_CPU: 3}
_TYPE_NAME = {0: "discrete GPU", 1: "integrated GPU", 2: "virtual GPU", 3: "CPU"}
_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD", 0x8086: "Intel", 0x10005: "Mesa", 0x13B5: "ARM",
            0x5143: "Qualcomm", 0x1010: "Imagination", 0x106B: "Apple"}
#: extensions enabled when present (promoted to core in 1.1/1.2; needed for fp16 on 1.1 devices)
_FP16_EXTENSIONS = ("VK_KHR_16bit_storage", "VK_KHR_storage_buffer_storage_class",
                    "VK_KHR_shader_float16_int8")
MEMORY_MODES = ("auto", "device_local", "host_visible")

_HV = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
_DL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
_USAGE = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
          | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
_COMPUTE = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
_TRANSFER = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
_SHADER_RW = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
_WRITES = vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT
_READS = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_UNIFORM_READ_BIT | vk.VK_ACCESS_TRANSFER_READ_BIT
          | vk.VK_ACCESS_HOST_READ_BIT)


def _create_instance() -> Any:
    # app_info and create_info are named so that the strings they point to outlive the call
    app_info = vk.VkApplicationInfo(pApplicationName="litegpu", applicationVersion=1, pEngineName="litegpu",
                                    engineVersion=1, apiVersion=_API_1_1)
    create_info = vk.VkInstanceCreateInfo(pApplicationInfo=app_info)
    try:
        return vk.vkCreateInstance(create_info, None)
    except (vk.VkError, vk.VkException) as e:
        raise BackendUnavailableError(f"vkCreateInstance failed ({type(e).__name__}): no Vulkan 1.1 driver; "
                                      "install one such as Mesa lavapipe (Debian mesa-vulkan-drivers)") from e


@dataclass(frozen=True)
class _Candidate:
    handle: Any
    name: str
    kind: int  # index into _TYPE_NAME
    queue_family: int


def _candidates(instance: Any) -> list[_Candidate]:
    """Usable physical devices (Vulkan >= 1.1 with a compute queue), discrete GPUs first, CPUs last."""
    found = []
    for pd in vk.vkEnumeratePhysicalDevices(instance):
        props = vk.vkGetPhysicalDeviceProperties(pd)
        if props.apiVersion < _API_1_1:
            continue
        families = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
        qf = next((i for i, f in enumerate(families) if f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None)
        if qf is None:
            continue
        found.append(_Candidate(pd, props.deviceName, _TYPE_ORDER.get(props.deviceType, 4), qf))
    found.sort(key=lambda c: c.kind)  # stable: the driver's order within a kind
    return found


def list_devices() -> list[str]:
    """Names of the usable devices in selection order (index = ``device`` option).

    Raises BackendUnavailableError with the reason when there is no driver or no device.
    """
    instance = _create_instance()
    try:
        cands = _candidates(instance)
    finally:
        vk.vkDestroyInstance(instance, None)
    if not cands:
        raise BackendUnavailableError("the Vulkan loader found no device with Vulkan 1.1 and a compute queue")
    return [f"{c.name} ({_TYPE_NAME.get(c.kind, 'other')})" for c in cands]


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


class _Buffer(_Resource):
    """One VkBuffer with its own memory; ``host`` is a uint8 view of the mapping when mappable."""

    def __init__(self, dev: VulkanDevice, nbytes: int, flags: int):
        super().__init__(dev)
        self.nbytes = nbytes
        self.busy: _Recording | None = None  # the last submission that used this buffer
        self.copies: dict[tuple, _Recording] = {}  # recorded device-to-device copies into this buffer
        d = dev._device
        create_info = vk.VkBufferCreateInfo(size=nbytes, usage=_USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        self.handle = _vk_call("vkCreateBuffer", vk.vkCreateBuffer, d, create_info, None)
        self._on_release(vk.vkDestroyBuffer, d, self.handle, None)
        req = vk.vkGetBufferMemoryRequirements(d, self.handle)
        self.memory = None
        for type_index in dev._memory_types(req.memoryTypeBits, flags):
            alloc_info = vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=type_index)
            try:
                self.memory = vk.vkAllocateMemory(d, alloc_info, None)
                break
            except (vk.VkErrorOutOfDeviceMemory, vk.VkErrorOutOfHostMemory):  # e.g. a small mappable heap
                continue
        if self.memory is None:
            raise DelegateError(f"{dev.info.name}: cannot allocate {nbytes} bytes of memory (flags {flags:#x})")
        self._on_release(vk.vkFreeMemory, d, self.memory, None)
        vk.vkBindBufferMemory(d, self.handle, self.memory, 0)
        self.host: np.ndarray | None = None
        if flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT:
            self.host = np.frombuffer(vk.vkMapMemory(d, self.memory, 0, nbytes, 0), np.uint8)
            self._on_release(vk.vkUnmapMemory, d, self.memory)


class _Program(_Resource):
    """Shader module, descriptor set layout, pipeline layout, pipeline, and the pipeline's own cache."""

    def __init__(self, dev: VulkanDevice, kernel: RenderedKernel, spirv: bytes, cache_data: bytes = b""):
        super().__init__(dev)
        d = dev._device
        self.spirv = spirv
        module_info = vk.VkShaderModuleCreateInfo(codeSize=len(spirv), pCode=spirv)
        self.module = _vk_call("vkCreateShaderModule", vk.vkCreateShaderModule, d, module_info, None)
        self._on_release(vk.vkDestroyShaderModule, d, self.module, None)
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
        cache_blob = ffi.from_buffer(cache_data) if cache_data else ffi.NULL
        cache_info = vk.VkPipelineCacheCreateInfo(initialDataSize=len(cache_data), pInitialData=cache_blob)
        self.cache = vk.vkCreatePipelineCache(d, cache_info, None)
        self._on_release(vk.vkDestroyPipelineCache, d, self.cache, None)
        # keep-alive: entry name and the by-value nested stage struct are named (module docstring)
        entry = ffi.new("char[]", kernel.entry_point.encode())
        stage = vk.VkPipelineShaderStageCreateInfo(stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=self.module,
                                                   pName=entry)
        pipeline_info = vk.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)
        self.pipeline = _vk_call(f"vkCreateComputePipelines ({kernel.name})", vk.vkCreateComputePipelines,
                                 d, self.cache, 1, pipeline_info, None)[0]
        self._on_release(vk.vkDestroyPipeline, d, self.pipeline, None)
        del entry, stage, pipeline_info

    def cache_data(self) -> bytes:
        d = self._dev._device
        size = ffi.new("size_t*")
        vk.lib.vkGetPipelineCacheData(d, self.cache, size, ffi.NULL)
        data = ffi.new("char[]", size[0])
        if vk.lib.vkGetPipelineCacheData(d, self.cache, size, data) != vk.VK_SUCCESS:
            return b""
        return bytes(ffi.buffer(data, size[0]))


class _Bound(_Resource):
    """A descriptor set (in its own pool) holding a launch's buffers and its params uniform buffer."""

    def __init__(self, dev: VulkanDevice, program: _Program, kernel: RenderedKernel,
                 buffers: Sequence[BufferRef], params: dict[str, Any]):
        super().__init__(dev)
        d = dev._device
        self.program = program
        refs = list(buffers)
        n_storage = sum(1 for b in kernel.bindings if b.kind == "storage")
        if len(refs) != n_storage:
            raise DelegateError(f"kernel {kernel.name} takes {n_storage} buffers, {len(refs)} given")
        self.params_buffer = None
        if any(b.kind == "uniform" for b in kernel.bindings):
            data = kernel.pack_params(params)
            self.params_buffer = dev._alloc(len(data), mappable=True)
            self.params_buffer.host[:len(data)] = np.frombuffer(data, np.uint8)
            refs.append(BufferRef(self.params_buffer, 0, len(data)))
        # (binding, buffer, offset, end, writes) for hazard tracking at record time
        self.uses = [(b.index, r.buffer, r.offset, r.offset + r.nbytes, b.access != "read")
                     for b, r in zip(kernel.bindings, refs, strict=True)]
        counts = {t: program.types.count(t) for t in set(program.types)}
        sizes = ffi.new("VkDescriptorPoolSize[]", len(counts))
        for i, (t, n) in enumerate(counts.items()):
            sizes[i].type = t
            sizes[i].descriptorCount = n
        pool_info = vk.VkDescriptorPoolCreateInfo(maxSets=1, poolSizeCount=len(counts), pPoolSizes=sizes)
        self.pool = vk.vkCreateDescriptorPool(d, pool_info, None)
        self._on_release(vk.vkDestroyDescriptorPool, d, self.pool, None)
        set_layouts = ffi.new("VkDescriptorSetLayout[1]", [program.set_layout])
        alloc_info = vk.VkDescriptorSetAllocateInfo(descriptorPool=self.pool, descriptorSetCount=1,
                                                    pSetLayouts=set_layouts)
        self.set = _vk_call("vkAllocateDescriptorSets", vk.vkAllocateDescriptorSets, d, alloc_info)[0]
        # buffer infos and writes are arrays we own: the writes point into `infos`, alive to the call
        infos = ffi.new("VkDescriptorBufferInfo[]", len(refs))
        writes = ffi.new("VkWriteDescriptorSet[]", len(refs))
        for i, r in enumerate(refs):
            if r.offset % dev.info.buffer_alignment:
                raise DelegateError(f"kernel {kernel.name}: binding {i} offset {r.offset} is not a multiple "
                                    f"of the device's {dev.info.buffer_alignment}-byte alignment")
            infos[i].buffer = r.buffer.handle
            infos[i].offset = r.offset
            infos[i].range = max(int(r.nbytes), 4)
            writes[i].sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            writes[i].dstSet = self.set
            writes[i].dstBinding = i
            writes[i].descriptorCount = 1
            writes[i].descriptorType = program.types[i]
            writes[i].pBufferInfo = infos + i
        vk.vkUpdateDescriptorSets(d, len(refs), writes, 0, None)


class _Recording(_Resource):
    """A command buffer recorded once, with the fence of its latest submission."""

    def __init__(self, dev: VulkanDevice, buffers: Sequence[_Buffer], keep: Sequence[Any] = ()):
        super().__init__(dev)
        d = dev._device
        self.buffers = list({id(b): b for b in buffers}.values())
        self.keep = list(keep)  # the bound sets (and through them programs) the commands refer to
        alloc_info = vk.VkCommandBufferAllocateInfo(commandPool=dev._pool, commandBufferCount=1,
                                                    level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY)
        self._cmds = vk.vkAllocateCommandBuffers(d, alloc_info)  # a VkCommandBuffer[1] we own
        self.cmd = self._cmds[0]
        self._on_release(vk.vkFreeCommandBuffers, d, dev._pool, 1, self._cmds)
        self.fence = vk.vkCreateFence(d, vk.VkFenceCreateInfo(), None)
        self._on_release(vk.vkDestroyFence, d, self.fence, None)
        self.pending = False
        # built once and reused per submit; named so its command-buffer array stays alive
        self.submit_info = vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=self._cmds)


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

    def __init__(self, device: int | str | None = None, *, memory: str = "auto", compiler: str | None = None,
                 fence_timeout: float = 60.0):
        if memory not in MEMORY_MODES:
            raise DelegateError(f"memory {memory!r} is not one of {', '.join(MEMORY_MODES)}")
        self._device = None
        self._owned: dict[int, list[tuple[Any, tuple]]] = {}  # destroy calls of live resources
        self.compiler = find_glsl_compiler(compiler)
        if self.compiler is None:
            raise BackendUnavailableError(
                f"GLSL compiler {compiler!r} not found" if compiler else
                "no GLSL -> SPIR-V compiler: install glslc (Debian glslc) or glslangValidator (glslang-tools)")
        self._instance = _create_instance()
        cands = _candidates(self._instance)
        if not cands:
            self._destroy_instance()
            raise BackendUnavailableError("the Vulkan loader found no device with Vulkan 1.1 and a compute queue")
        if isinstance(device, str):
            matches = [c for c in cands if device.lower() in c.name.lower()]
            if not matches:
                self._destroy_instance()
                raise BackendUnavailableError(f"no Vulkan device matches {device!r} (found: "
                                              f"{', '.join(c.name for c in cands)})")
            chosen = matches[0]
        else:
            idx = device or 0
            if not 0 <= idx < len(cands):
                self._destroy_instance()
                raise BackendUnavailableError(f"Vulkan device index {idx} out of range (found {len(cands)})")
            chosen = cands[idx]
        self._pd = chosen.handle
        self._timeout_ns = int(fence_timeout * 1e9)
        self._create_device(chosen)
        if memory == "auto":
            memory = "device_local" if chosen.kind == 0 else "host_visible"
        self.memory_mode = memory
        self._staging: _Buffer | None = None
        self._xfer = _Recording(self, [])
        self._programs: dict[str, _Program] = {}
        self._spirv: dict[str, bytes] = {}
        self._last: _Recording | None = None

    def _create_device(self, chosen: _Candidate) -> None:
        pd = self._pd
        props = vk.vkGetPhysicalDeviceProperties(pd)
        limits = props.limits
        self._max_groups = [int(n) for n in limits.maxComputeWorkGroupCount]
        mp = vk.vkGetPhysicalDeviceMemoryProperties(pd)
        self._mem_flags = [int(mp.memoryTypes[i].propertyFlags) for i in range(mp.memoryTypeCount)]
        # feature query chain: each struct named so the pNext pointers stay valid
        storage16 = vk.VkPhysicalDevice16BitStorageFeatures()
        float16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=storage16)
        features2 = vk.VkPhysicalDeviceFeatures2(pNext=float16)
        vk.vkGetPhysicalDeviceFeatures2(pd, features2)
        fp16 = bool(storage16.storageBuffer16BitAccess and float16.shaderFloat16)
        available = {e.extensionName for e in vk.vkEnumerateDeviceExtensionProperties(pd, None)}
        ext_names = [e for e in _FP16_EXTENSIONS if e in available] if fp16 else []
        # enable exactly what fp16 kernels need (chained again, named for the same reason)
        want16 = vk.VkPhysicalDevice16BitStorageFeatures(storageBuffer16BitAccess=int(fp16))
        want_f16 = vk.VkPhysicalDeviceShaderFloat16Int8Features(pNext=want16, shaderFloat16=int(fp16))
        priorities = ffi.new("float[1]", [1.0])
        queue_info = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=chosen.queue_family, queueCount=1,
                                                pQueuePriorities=priorities)
        queue_infos = ffi.new("VkDeviceQueueCreateInfo[1]", [queue_info])
        ext_c = [ffi.new("char[]", e.encode()) for e in ext_names]
        ext_arr = ffi.new("char*[]", ext_c) if ext_c else ffi.NULL
        device_info = vk.VkDeviceCreateInfo(pNext=want_f16 if fp16 else None, queueCreateInfoCount=1,
                                            pQueueCreateInfos=queue_infos, enabledExtensionCount=len(ext_c),
                                            ppEnabledExtensionNames=ext_arr)
        try:
            self._device = vk.vkCreateDevice(pd, device_info, None)
        except (vk.VkError, vk.VkException) as e:
            self._destroy_instance()
            raise BackendUnavailableError(f"vkCreateDevice on {chosen.name} failed: {type(e).__name__}") from e
        del want16, want_f16, priorities, queue_info, queue_infos, ext_c, ext_arr, device_info
        self._queue = vk.vkGetDeviceQueue(self._device, chosen.queue_family, 0)
        pool_info = vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=chosen.queue_family, flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT)
        self._pool = vk.vkCreateCommandPool(self._device, pool_info, None)
        v = props.apiVersion
        self.info = DeviceInfo(
            api="vulkan", name=chosen.name, vendor=_VENDORS.get(props.vendorID, hex(props.vendorID)),
            driver_version=f"{props.driverVersion} (Vulkan {v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF})",
            fp16=fp16, max_workgroup_size=int(limits.maxComputeWorkGroupInvocations),
            buffer_alignment=max(int(limits.minStorageBufferOffsetAlignment), 4), compute_units=1)

    # -- allocator
    def _memory_types(self, type_bits: int, flags: int) -> list[int]:
        """Memory type indices with ``flags`` allowed by ``type_bits``: device-local ones first and,
        when host access is not asked for, those without it (a discrete GPU's small mappable heap
        is kept for staging and params)."""
        ok = [i for i, f in enumerate(self._mem_flags) if type_bits >> i & 1 and f & flags == flags]
        if not ok:
            raise DelegateError(f"{self.info.name}: no memory type with flags {flags:#x}")
        extra_host = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT & ~flags
        return sorted(ok, key=lambda i: (not self._mem_flags[i] & _DL, bool(self._mem_flags[i] & extra_host)))

    def _alloc(self, nbytes: int, *, mappable: bool) -> _Buffer:
        return _Buffer(self, max(int(nbytes), 16), _HV if mappable else _DL)

    def alloc(self, nbytes: int) -> _Buffer:
        self._open()
        return self._alloc(nbytes, mappable=self.memory_mode == "host_visible")

    def _staging_for(self, nbytes: int) -> _Buffer:
        if self._staging is None or self._staging.nbytes < nbytes:
            self._staging = None
            self._staging = self._alloc(1 << max(int(nbytes) - 1, 15).bit_length(), mappable=True)
        return self._staging

    def _transfer(self, src: BufferRef, dst: BufferRef, nbytes: int) -> None:
        """Synchronous buffer copy on the transfer command buffer (staging path)."""
        rec = self._xfer
        self._wait(rec)
        self._begin(rec, one_time=True)
        self._record_copy(rec.cmd, src, dst, nbytes)
        self._end(rec)
        rec.buffers = [src.buffer, dst.buffer]
        self._submit(rec)
        self._wait(rec)

    def upload(self, ref: BufferRef, data: np.ndarray) -> None:
        self._open()
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        n = min(raw.size, ref.nbytes)
        buf: _Buffer = ref.buffer
        self._wait_for(buf)  # the GPU may still read or write it
        if buf.host is not None:
            buf.host[ref.offset:ref.offset + n] = raw[:n]
            return
        staging = self._staging_for(n)
        staging.host[:n] = raw[:n]
        self._transfer(BufferRef(staging, 0, n), ref, n)

    def download(self, ref: BufferRef, out: np.ndarray) -> None:
        if not out.flags.c_contiguous:  # a reshape would copy and the data would land in the copy
            raise DelegateError("download needs a C-contiguous host array")
        self._open()
        flat = out.reshape(-1).view(np.uint8)
        n = min(flat.size, ref.nbytes)
        buf: _Buffer = ref.buffer
        self._wait_for(buf)
        if buf.host is not None:
            flat[:n] = buf.host[ref.offset:ref.offset + n]
            return
        staging = self._staging_for(n)
        self._transfer(ref, BufferRef(staging, 0, n), n)
        flat[:n] = staging.host[:n]

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
        spirv = self._spirv.get(kernel.source)
        if spirv is None:
            try:
                spirv = compile_spirv(kernel.source, compiler=self.compiler, vulkan="vulkan1.1")
            except FileNotFoundError as e:
                raise BackendUnavailableError(str(e)) from e
            except Exception as e:  # the compiler's message names the line
                raise DelegateError(f"SPIR-V compile of kernel {kernel.name} failed: {e}") from e
            self._spirv[kernel.source] = spirv
        return spirv

    def compile(self, kernel: RenderedKernel) -> _Program:
        self._open()
        prog = self._programs.get(kernel.source)
        if prog is None:
            if "f16" in kernel.features and not self.info.fp16:
                raise DelegateError(f"{self.info.name} has no shaderFloat16/storageBuffer16BitAccess: "
                                    "use precision fp32")
            prog = _Program(self, kernel, self._compile_spirv(kernel))
            self._programs[kernel.source] = prog
        return prog

    _MAGIC = b"LGVK1\0"

    def program_binary(self, program: _Program) -> bytes | None:
        """SPIR-V plus the pipeline's VkPipelineCache data (skips glslc and the driver's compile)."""
        spirv = program.spirv
        return self._MAGIC + len(spirv).to_bytes(8, "little") + spirv + program.cache_data()

    def program_from_binary(self, kernel: RenderedKernel, binary: bytes) -> _Program | None:
        self._open()
        m = len(self._MAGIC)
        if binary[:m] != self._MAGIC or len(binary) < m + 8:
            return None
        n = int.from_bytes(binary[m:m + 8], "little")
        spirv, cache = binary[m + 8:m + 8 + n], binary[m + 8 + n:]
        if len(spirv) != n or n % 4:
            return None
        try:  # the driver ignores cache data of another device or driver version by itself
            prog = _Program(self, kernel, spirv, cache)
        except DelegateError:
            return None
        self._programs[kernel.source] = prog
        self._spirv[kernel.source] = spirv
        return prog

    def bind(self, program: _Program, kernel: RenderedKernel, buffers: Sequence[BufferRef],
             params: dict[str, Any]) -> _Bound:
        self._open()
        return _Bound(self, program, kernel, buffers, params)

    # -- recording and submission
    def _begin(self, rec: _Recording, one_time: bool = False) -> None:
        flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT if one_time else 0
        vk.vkBeginCommandBuffer(rec.cmd, vk.VkCommandBufferBeginInfo(flags=flags))

    def _end(self, rec: _Recording) -> None:
        _vk_call("vkEndCommandBuffer", vk.vkEndCommandBuffer, rec.cmd)

    def record(self, launches: Sequence[tuple[_Bound, RenderedKernel, tuple[int, int, int]]]) -> _Recording:
        """All launches in one command buffer, a barrier only where a launch depends on an earlier one."""
        self._open()
        limits = self._max_groups
        rec = _Recording(self, [u[1] for bound, _k, _g in launches for u in bound.uses],
                         keep=[bound for bound, _k, _g in launches])
        cmd = rec.cmd
        self._begin(rec)
        # earlier submissions (previous partition, copies, transfers) write what we read: wait for them
        _barrier(cmd, _COMPUTE | _TRANSFER, _WRITES, _COMPUTE, _SHADER_RW | vk.VK_ACCESS_UNIFORM_READ_BIT)
        reads: list[tuple[int, int, int]] = []
        writes: list[tuple[int, int, int]] = []
        pipeline = None
        for bound, kernel, grid in launches:
            groups = [-(-int(g) // w) for g, w in zip(grid, kernel.workgroup, strict=True)]
            if any(n > lim for n, lim in zip(groups, limits, strict=True)):
                raise DelegateError(f"kernel {kernel.name}: {groups} work groups exceed the device's {limits}")
            mine_r = [(id(b), lo, hi) for _i, b, lo, hi, w in bound.uses if not w]
            mine_w = [(id(b), lo, hi) for _i, b, lo, hi, w in bound.uses if w]
            if _overlaps(mine_r + mine_w, writes) or _overlaps(mine_w, reads):
                _barrier(cmd, _COMPUTE, vk.VK_ACCESS_SHADER_WRITE_BIT, _COMPUTE, _SHADER_RW)
                reads, writes = [], []
            reads += mine_r
            writes += mine_w
            prog = bound.program
            if prog.pipeline is not pipeline:
                vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, prog.pipeline)
                pipeline = prog.pipeline
            sets = ffi.new("VkDescriptorSet[1]", [bound.set])
            vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, prog.layout, 0, 1, sets, 0, None)
            vk.vkCmdDispatch(cmd, *groups)
        # results become visible to later copies, transfers and host reads after the fence
        _barrier(cmd, _COMPUTE, vk.VK_ACCESS_SHADER_WRITE_BIT,
                 _COMPUTE | _TRANSFER | vk.VK_PIPELINE_STAGE_HOST_BIT, _READS | _SHADER_RW)
        self._end(rec)
        return rec

    def replay(self, rec: _Recording) -> None:
        """Submit a partition's command buffer from :meth:`record` once more (no host wait)."""
        self._submit(rec)

    def _submit(self, rec: _Recording) -> None:
        device = self._open()
        self._wait(rec)  # a command buffer is resubmitted only after its previous run ended
        vk.vkResetFences(device, 1, [rec.fence])
        _vk_call("vkQueueSubmit", vk.vkQueueSubmit, self._queue, 1, rec.submit_info, rec.fence)
        rec.pending = True
        for b in rec.buffers:
            b.busy = rec
        self._last = rec

    def launch(self, bound: _Bound, kernel: RenderedKernel, grid: tuple[int, int, int]) -> None:
        """One launch on its own (slow path: the executor records whole partitions with :meth:`record`)."""
        rec = self.record([(bound, kernel, grid)])
        self._submit(rec)
        self._wait(rec)

    def _wait(self, rec: _Recording | None) -> None:
        if rec is None or not rec.pending or self._device is None:
            return
        try:
            vk.vkWaitForFences(self._device, 1, [rec.fence], vk.VK_TRUE, self._timeout_ns)
        except vk.VkTimeout as e:
            raise DelegateError(f"{self.info.name}: GPU work did not finish within "
                                f"{self._timeout_ns / 1e9:g} s (fence_timeout)") from e
        except (vk.VkError, vk.VkException) as e:
            raise DelegateError(f"{self.info.name}: waiting for the GPU failed: {type(e).__name__}") from e
        rec.pending = False

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
        if self._device is None:
            return
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
            self._staging = self._xfer = self._last = None
            vk.vkDestroyCommandPool(self._device, self._pool, None)
            vk.vkDestroyDevice(self._device, None)
            self._device = None
            self._destroy_instance()

    def _destroy_instance(self) -> None:
        if getattr(self, "_instance", None) is not None:
            vk.vkDestroyInstance(self._instance, None)
            self._instance = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _overlaps(a: list[tuple[int, int, int]], b: list[tuple[int, int, int]]) -> bool:
    return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] for x in a for y in b)
