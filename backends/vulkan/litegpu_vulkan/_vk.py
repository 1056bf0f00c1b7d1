"""The Vulkan calls the backend makes, on the ``vulkan`` package's cffi declarations.

Why not ``import vulkan``: the package's module of Python wrappers (one function per Vulkan command
and struct, about 7,700 names, 1.1 MB of bytecode) cost 9-10 ms of every start on the 2-core CI
machine, on the caller's thread, before the driver's instance could start; the backend uses about
fifty of them.  This module loads only the package's out-of-line cffi module (its ``ffi``: the C
declarations, types built lazily) and dlopens libvulkan itself, and wraps the commands the backend
makes, with the package's conventions: a ``vkCreate*`` / ``vkAllocate*`` / ``vkGet*`` returns what
the command writes to its last argument, a failed ``VkResult`` raises the matching
:class:`VkError` (negative codes) or :class:`VkException` subclass, ``None`` is ``NULL`` and a struct
passed where a pointer is wanted is passed by address.  Enum constants are the ffi's (``VK_*``,
looked up once and kept in this module).

Struct constructors (``VkBufferCreateInfo(size=...)``) fill ``sType`` and convert pointer fields
(a struct to its address, ``str`` to a ``char[]``, ``bytes`` to a pointer into them, a list to an
array).  Everything a struct's pointers reach is kept alive as long as the struct itself (the
package kept its own temporaries only, and not those of a struct nested in another: see
``_device``'s keep-alive rule, which still holds for the arrays ``_device`` builds itself).

The package's ``_vulkancache`` module is registered under its own name, so a later ``import vulkan``
(a test, a bench) shares this ``ffi`` and its types.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import weakref
from typing import Any

__all__ = ["ffi", "lib", "text", "VkError", "VkException"]


def _load_ffi() -> Any:
    """The ``vulkan`` package's cffi ``FFI`` (its ``_vulkancache`` module) without importing the package
    (whose ``__init__`` imports every wrapper).  ImportError when the package is not installed."""
    mod = sys.modules.get("vulkan._vulkancache")
    if mod is None:
        spec = importlib.util.find_spec("vulkan")  # locates the package; imports nothing
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("No module named 'vulkan'")
        path = os.path.join(next(iter(spec.submodule_search_locations)), "_vulkancache.py")
        sub = importlib.util.spec_from_file_location("vulkan._vulkancache", path)
        if sub is None or sub.loader is None or not os.path.exists(path):
            raise ImportError(f"the vulkan package has no cffi module at {path}")
        mod = importlib.util.module_from_spec(sub)
        sub.loader.exec_module(mod)
        mod = sys.modules.setdefault("vulkan._vulkancache", mod)
    return mod.ffi


ffi = _load_ffi()


def _dlopen() -> Any:
    errors = []
    for name in ("libvulkan.so.1", "vulkan-1.dll", "libvulkan.dylib"):
        try:
            return ffi.dlopen(name)
        except OSError as e:
            errors.append(str(e))
    raise OSError(f"cannot load the Vulkan loader (libvulkan): {'; '.join(errors)}")


lib = _dlopen()

VK_TRUE = 1  # a #define, not in the ffi's enums


def VK_MAKE_VERSION(major: int, minor: int, patch: int) -> int:  # noqa: N802 - the C macro's name
    return (major << 22) | (minor << 12) | patch


def __getattr__(name: str) -> Any:
    """``VK_*`` enum constants from the ffi (kept here after the first lookup), and the exception
    classes of the ``VkResult`` codes (made on first use: only a failure needs them)."""
    if name.startswith("VK_"):
        try:
            value = getattr(lib, name)
        except AttributeError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        globals()[name] = value
        return value
    if name == "exception_codes" or name.startswith("Vk"):
        codes = _exception_codes()
        if name == "exception_codes":
            return codes
        for cls in codes.values():
            if cls.__name__ == name:
                return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class VkException(Exception):
    """A non-error ``VkResult`` other than VK_SUCCESS where success was required (VK_TIMEOUT, ...)."""


class VkError(Exception):
    """A failed Vulkan command (a negative ``VkResult``); the subclass names the code."""


_CODES: dict[int, type[Exception]] = {}
_CODES_LOCK = threading.Lock()


def _exception_codes() -> dict[int, type[Exception]]:
    """``VkResult`` value -> exception class named after the code (VK_ERROR_OUT_OF_HOST_MEMORY ->
    VkErrorOutOfHostMemory, the ``vulkan`` package's names), made once."""
    with _CODES_LOCK:
        if _CODES:
            return _CODES
        for value, cname in ffi.typeof("VkResult").elements.items():
            if value == 0 or cname.endswith("_MAX_ENUM"):
                continue
            name = "".join(part.capitalize() for part in cname.split("_"))
            cls = type(name, (VkError if value < 0 else VkException,), {"__module__": __name__})
            _CODES.setdefault(value, cls)
            globals().setdefault(name, cls)
    return _CODES


def _check(result: int) -> None:
    if result != 0:
        codes = _exception_codes()
        cls = codes.get(result)
        raise (cls if cls is not None else VkError if result < 0 else VkException)(f"VkResult {result}")


def text(chars: Any) -> str:
    """A fixed-size ``char[]`` field (a device or extension name) as str."""
    raw = ffi.string(chars)
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


# -- structs

#: what a struct's pointer fields reach (strings, arrays, nested structs): alive while the struct is
_KEEP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: field name -> (is a pointer, its type) per struct, built on the first construction of each
_FIELDS: dict[str, dict[str, tuple[bool, Any]]] = {}


def _fields(cname: str) -> dict[str, tuple[bool, Any]]:
    got = _FIELDS.get(cname)
    if got is None:
        got = _FIELDS[cname] = {n: (f.type.kind == "pointer", f.type) for n, f in ffi.typeof(cname).fields}
    return got


def _pointer(value: Any, ctype: Any, keep: list[Any]) -> Any:
    """``value`` as a pointer field of type ``ctype``; what the pointer reaches goes into ``keep``."""
    if isinstance(value, ffi.CData):
        keep.append(value)
        if ffi.typeof(value).kind == "struct":
            return ffi.addressof(value)
        return value
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        if ctype.item.cname == "char":
            buf = ffi.new("char[]", bytes(value))
        else:
            buf = ffi.from_buffer(value)  # e.g. pCode: SPIR-V words read in place
        keep.append(value)
        keep.append(buf)
        return ffi.cast(ctype, buf)
    if isinstance(value, (list, tuple)):
        items = [_pointer(v, ctype.item, keep) if ctype.item.kind == "pointer" else v for v in value]
        arr = ffi.new(ctype.item.cname + "[]", items)
        keep.append(arr)
        keep.extend(value)  # structs copied into the array by value: what their pointers reach lives on in them
        return arr
    return ffi.cast(ctype, value)


def _new(cname: str, s_type: int | None, fields: dict[str, Any]) -> Any:
    """A ``cname`` struct (by value, owning its memory) with ``fields`` set and ``sType``."""
    layout = _fields(cname)
    init: dict[str, Any] = {}
    keep: list[Any] = []
    if s_type is not None:
        init["sType"] = s_type
    for name, value in fields.items():
        if value is None:
            continue
        try:
            is_ptr, ctype = layout[name]
        except KeyError:
            raise TypeError(f"{cname} has no field {name!r}") from None
        init[name] = _pointer(value, ctype, keep) if is_ptr else value
    struct = ffi.new(cname + "*", init)[0]
    if keep:
        _KEEP[struct] = keep
    return struct


def _struct(cname: str, s_type_name: str | None) -> Any:
    s_type: list[int | None] = []

    def make(**fields: Any) -> Any:
        if not s_type:
            s_type.append(getattr(lib, s_type_name) if s_type_name else None)
        return _new(cname, fields.pop("sType", s_type[0]), fields)

    make.__name__ = make.__qualname__ = cname
    make.__doc__ = f"A {cname} struct (sType set, pointer fields converted and kept alive)."
    return make


VkApplicationInfo = _struct("VkApplicationInfo", "VK_STRUCTURE_TYPE_APPLICATION_INFO")
VkInstanceCreateInfo = _struct("VkInstanceCreateInfo", "VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO")
VkPhysicalDevice16BitStorageFeatures = _struct("VkPhysicalDevice16BitStorageFeatures",
                                               "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES")
VkPhysicalDeviceShaderFloat16Int8Features = _struct(
    "VkPhysicalDeviceShaderFloat16Int8Features", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES")
VkPhysicalDeviceFeatures2 = _struct("VkPhysicalDeviceFeatures2", "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2")
VkDeviceQueueCreateInfo = _struct("VkDeviceQueueCreateInfo", "VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO")
VkDeviceCreateInfo = _struct("VkDeviceCreateInfo", "VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO")
VkCommandPoolCreateInfo = _struct("VkCommandPoolCreateInfo", "VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO")
VkPipelineCacheCreateInfo = _struct("VkPipelineCacheCreateInfo", "VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO")
VkMemoryAllocateInfo = _struct("VkMemoryAllocateInfo", "VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO")
VkBufferCreateInfo = _struct("VkBufferCreateInfo", "VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO")
VkDescriptorSetLayoutCreateInfo = _struct("VkDescriptorSetLayoutCreateInfo",
                                          "VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO")
VkPipelineLayoutCreateInfo = _struct("VkPipelineLayoutCreateInfo", "VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO")
VkShaderModuleCreateInfo = _struct("VkShaderModuleCreateInfo", "VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO")
VkDescriptorPoolCreateInfo = _struct("VkDescriptorPoolCreateInfo", "VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO")
VkDescriptorSetAllocateInfo = _struct("VkDescriptorSetAllocateInfo",
                                      "VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO")
VkCommandBufferAllocateInfo = _struct("VkCommandBufferAllocateInfo",
                                      "VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO")
VkCommandBufferBeginInfo = _struct("VkCommandBufferBeginInfo", "VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO")
VkFenceCreateInfo = _struct("VkFenceCreateInfo", "VK_STRUCTURE_TYPE_FENCE_CREATE_INFO")
VkSubmitInfo = _struct("VkSubmitInfo", "VK_STRUCTURE_TYPE_SUBMIT_INFO")
VkMemoryBarrier = _struct("VkMemoryBarrier", "VK_STRUCTURE_TYPE_MEMORY_BARRIER")
VkQueryPoolCreateInfo = _struct("VkQueryPoolCreateInfo", "VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO")
VkBufferCopy = _struct("VkBufferCopy", None)


# -- commands


def _p(x: Any) -> Any:
    """An argument where the command takes a pointer: None -> NULL, a struct -> its address."""
    if x is None:
        return ffi.NULL
    if isinstance(x, ffi.CData) and ffi.typeof(x).kind == "struct":
        return ffi.addressof(x)
    return x


def _made(fn: Any, out_type: str, *args: Any) -> Any:
    """Call a command whose last argument receives one handle; return the handle."""
    out = ffi.new(out_type + "*")
    _check(fn(*args, out))
    return out[0]


def vkCreateInstance(info: Any, allocator: Any) -> Any:  # noqa: N802 - Vulkan's names throughout
    return _made(lib.vkCreateInstance, "VkInstance", _p(info), _p(allocator))


def vkDestroyInstance(instance: Any, allocator: Any) -> None:  # noqa: N802
    lib.vkDestroyInstance(instance, _p(allocator))


def vkEnumeratePhysicalDevices(instance: Any) -> list[Any]:  # noqa: N802
    count = ffi.new("uint32_t*")
    _check(lib.vkEnumeratePhysicalDevices(instance, count, ffi.NULL))
    out = ffi.new("VkPhysicalDevice[]", count[0])
    _check(lib.vkEnumeratePhysicalDevices(instance, count, out))
    return [out[i] for i in range(count[0])]


def vkGetPhysicalDeviceProperties(pd: Any) -> Any:  # noqa: N802
    out = ffi.new("VkPhysicalDeviceProperties*")
    lib.vkGetPhysicalDeviceProperties(pd, out)
    return out[0]


def vkGetPhysicalDeviceQueueFamilyProperties(pd: Any) -> Any:  # noqa: N802
    count = ffi.new("uint32_t*")
    lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, ffi.NULL)
    out = ffi.new("VkQueueFamilyProperties[]", count[0])
    lib.vkGetPhysicalDeviceQueueFamilyProperties(pd, count, out)
    return out


def vkGetPhysicalDeviceMemoryProperties(pd: Any) -> Any:  # noqa: N802
    out = ffi.new("VkPhysicalDeviceMemoryProperties*")
    lib.vkGetPhysicalDeviceMemoryProperties(pd, out)
    return out[0]


def vkGetPhysicalDeviceFeatures2(pd: Any, features: Any) -> None:  # noqa: N802
    lib.vkGetPhysicalDeviceFeatures2(pd, _p(features))


def vkEnumerateDeviceExtensionProperties(pd: Any, layer: Any) -> list[str]:  # noqa: N802
    """The names of the device's extensions (the package returned the structs, wrapped)."""
    name = ffi.new("char[]", layer.encode()) if isinstance(layer, str) else _p(layer)
    count = ffi.new("uint32_t*")
    _check(lib.vkEnumerateDeviceExtensionProperties(pd, name, count, ffi.NULL))
    out = ffi.new("VkExtensionProperties[]", count[0])
    _check(lib.vkEnumerateDeviceExtensionProperties(pd, name, count, out))
    return [text(out[i].extensionName) for i in range(count[0])]


def vkCreateDevice(pd: Any, info: Any, allocator: Any) -> Any:  # noqa: N802
    return _made(lib.vkCreateDevice, "VkDevice", pd, _p(info), _p(allocator))


def vkDestroyDevice(device: Any, allocator: Any) -> None:  # noqa: N802
    lib.vkDestroyDevice(device, _p(allocator))


def vkDeviceWaitIdle(device: Any) -> None:  # noqa: N802
    _check(lib.vkDeviceWaitIdle(device))


def vkGetDeviceQueue(device: Any, family: int, index: int) -> Any:  # noqa: N802
    out = ffi.new("VkQueue*")
    lib.vkGetDeviceQueue(device, family, index, out)
    return out[0]


def _create_destroy(what: str) -> tuple[Any, Any]:
    """vkCreate<what>(device, info, allocator) -> handle and vkDestroy<what>(device, handle, allocator)."""
    out_type = "Vk" + what

    def create(device: Any, info: Any, allocator: Any) -> Any:
        return _made(getattr(lib, "vkCreate" + what), out_type, device, _p(info), _p(allocator))

    def destroy(device: Any, handle: Any, allocator: Any) -> None:
        getattr(lib, "vkDestroy" + what)(device, handle, _p(allocator))

    create.__name__ = create.__qualname__ = "vkCreate" + what
    destroy.__name__ = destroy.__qualname__ = "vkDestroy" + what
    return create, destroy


vkCreateCommandPool, vkDestroyCommandPool = _create_destroy("CommandPool")
vkCreatePipelineCache, vkDestroyPipelineCache = _create_destroy("PipelineCache")
vkCreateBuffer, vkDestroyBuffer = _create_destroy("Buffer")
vkCreateDescriptorSetLayout, vkDestroyDescriptorSetLayout = _create_destroy("DescriptorSetLayout")
vkCreatePipelineLayout, vkDestroyPipelineLayout = _create_destroy("PipelineLayout")
vkCreateShaderModule, vkDestroyShaderModule = _create_destroy("ShaderModule")
vkCreateDescriptorPool, vkDestroyDescriptorPool = _create_destroy("DescriptorPool")
vkCreateFence, vkDestroyFence = _create_destroy("Fence")
vkCreateQueryPool, vkDestroyQueryPool = _create_destroy("QueryPool")
_, vkDestroyPipeline = _create_destroy("Pipeline")  # pipelines are made by vkCreateComputePipelines (lib)


def vkAllocateMemory(device: Any, info: Any, allocator: Any) -> Any:  # noqa: N802
    return _made(lib.vkAllocateMemory, "VkDeviceMemory", device, _p(info), _p(allocator))


def vkFreeMemory(device: Any, memory: Any, allocator: Any) -> None:  # noqa: N802
    lib.vkFreeMemory(device, memory, _p(allocator))


def vkMapMemory(device: Any, memory: Any, offset: int, size: int, flags: int) -> Any:  # noqa: N802
    """The mapping as a writable buffer of ``size`` bytes."""
    out = ffi.new("void**")
    _check(lib.vkMapMemory(device, memory, offset, size, flags, out))
    return ffi.buffer(out[0], size)


def vkUnmapMemory(device: Any, memory: Any) -> None:  # noqa: N802
    lib.vkUnmapMemory(device, memory)


def vkGetBufferMemoryRequirements(device: Any, buffer: Any) -> Any:  # noqa: N802
    out = ffi.new("VkMemoryRequirements*")
    lib.vkGetBufferMemoryRequirements(device, buffer, out)
    return out[0]


def vkBindBufferMemory(device: Any, buffer: Any, memory: Any, offset: int) -> None:  # noqa: N802
    _check(lib.vkBindBufferMemory(device, buffer, memory, offset))


def vkAllocateDescriptorSets(device: Any, info: Any) -> Any:  # noqa: N802
    """A VkDescriptorSet[descriptorSetCount] array."""
    out = ffi.new("VkDescriptorSet[]", info.descriptorSetCount)
    _check(lib.vkAllocateDescriptorSets(device, _p(info), out))
    return out


def vkUpdateDescriptorSets(device: Any, n_writes: int, writes: Any, n_copies: int, copies: Any) -> None:  # noqa: N802
    lib.vkUpdateDescriptorSets(device, n_writes, _p(writes), n_copies, _p(copies))


def vkAllocateCommandBuffers(device: Any, info: Any) -> Any:  # noqa: N802
    """A VkCommandBuffer[commandBufferCount] array."""
    out = ffi.new("VkCommandBuffer[]", info.commandBufferCount)
    _check(lib.vkAllocateCommandBuffers(device, _p(info), out))
    return out


def vkFreeCommandBuffers(device: Any, pool: Any, count: int, buffers: Any) -> None:  # noqa: N802
    lib.vkFreeCommandBuffers(device, pool, count, _p(buffers))


def vkBeginCommandBuffer(cmd: Any, info: Any) -> None:  # noqa: N802
    _check(lib.vkBeginCommandBuffer(cmd, _p(info)))


def vkEndCommandBuffer(cmd: Any) -> None:  # noqa: N802
    _check(lib.vkEndCommandBuffer(cmd))


def vkCmdPipelineBarrier(cmd: Any, src_stage: int, dst_stage: int, dependency: int, n_memory: int,  # noqa: N802
                         memory: Any, n_buffer: int, buffer: Any, n_image: int, image: Any) -> None:
    lib.vkCmdPipelineBarrier(cmd, src_stage, dst_stage, dependency, n_memory, _p(memory), n_buffer, _p(buffer),
                             n_image, _p(image))


def vkCmdCopyBuffer(cmd: Any, src: Any, dst: Any, n: int, regions: Any) -> None:  # noqa: N802
    lib.vkCmdCopyBuffer(cmd, src, dst, n, _p(regions))


def vkCmdBindPipeline(cmd: Any, bind_point: int, pipeline: Any) -> None:  # noqa: N802
    lib.vkCmdBindPipeline(cmd, bind_point, pipeline)


def vkCmdBindDescriptorSets(cmd: Any, bind_point: int, layout: Any, first: int, n: int, sets: Any,  # noqa: N802
                            n_offsets: int, offsets: Any) -> None:
    lib.vkCmdBindDescriptorSets(cmd, bind_point, layout, first, n, _p(sets), n_offsets, _p(offsets))


def vkCmdDispatch(cmd: Any, x: int, y: int, z: int) -> None:  # noqa: N802
    lib.vkCmdDispatch(cmd, x, y, z)


def vkCmdWriteTimestamp(cmd: Any, stage: int, pool: Any, query: int) -> None:  # noqa: N802
    lib.vkCmdWriteTimestamp(cmd, stage, pool, query)


def vkCmdResetQueryPool(cmd: Any, pool: Any, first: int, count: int) -> None:  # noqa: N802
    lib.vkCmdResetQueryPool(cmd, pool, first, count)
