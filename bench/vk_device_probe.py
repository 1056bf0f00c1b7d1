"""How NVIDIA's Vulkan driver starts in a process: instances and devices one after another, and wgpu's
device after (or beside) a bare ``VkDevice``.  One mode per fresh process; prints one line of ms.

Usage: ``python bench/vk_device_probe.py MODE`` (run each mode several times, alternated), where MODE is

* ``devices``: a bare ``vkCreateInstance``, then ``vkCreateDevice`` (one compute queue, no extensions)
  three times on it (the third after destroying the first; the destroy timed), an empty compute
  pipeline on the first two, a second instance and a device on it: does a process's first device
  carry a per-process cost that later ones skip?
* ``chain``: a bare instance (the webgpu backend's Vulkan warm-up), then wgpu's instance, enumeration
  and device request through the backend's native start (``litegpu_webgpu._adapters``): today's chain;
* ``after-kept`` / ``after-destroyed``: the same with a bare device made first (kept / destroyed);
* ``beside``: a bare device made on a second thread while wgpu's instance and device are made;
* ``beside-all``: a bare instance and device on a second thread from the start, wgpu's chain beside it.

The wgpu modes need litegpu's cache to hold the native start's stored structs (one earlier webgpu
start in the same cache).  "ready at" is ms after the imports.  The 2026-11-27 run (H100,
``docs/performance.md``, s15-wgpudev) decided against a bare device beside wgpu's start.
"""

from __future__ import annotations

import ctypes as C
import sys
import threading
import time
from typing import Any

P, U32, U64 = C.c_void_p, C.c_uint32, C.c_uint64
MODES = ("devices", "chain", "after-kept", "after-destroyed", "beside", "beside-all")


class InstanceInfo(C.Structure):  # VkInstanceCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("app", P), ("nl", U32), ("pl", P), ("ne", U32),
                ("pe", P)]


class QueueInfo(C.Structure):  # VkDeviceQueueCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("family", U32), ("count", U32),
                ("prio", C.POINTER(C.c_float))]


class DeviceInfo(C.Structure):  # VkDeviceCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("nq", U32), ("q", C.POINTER(QueueInfo)), ("nl", U32),
                ("pl", P), ("ne", U32), ("pe", P), ("feat", P)]


class ModuleInfo(C.Structure):  # VkShaderModuleCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("size", C.c_size_t), ("code", P)]


class LayoutInfo(C.Structure):  # VkPipelineLayoutCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("ns", U32), ("s", P), ("np", U32), ("p", P)]


class StageInfo(C.Structure):  # VkPipelineShaderStageCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("stage", U32), ("module", U64), ("name", C.c_char_p),
                ("spec", P)]


class PipelineInfo(C.Structure):  # VkComputePipelineCreateInfo
    _fields_ = [("sType", U32), ("pNext", P), ("flags", U32), ("stage", StageInfo), ("layout", U64), ("base", U64),
                ("bi", C.c_int32)]


# ``layout(local_size_x = 1) in; void main() {}`` (GLSL 450) compiled by ``glslc -O``
EMPTY_SPIRV = bytes.fromhex(
    "03022307000001000b000d000a0000000000000011000200010000000b00060001000000474c534c2e7374642e34353000000000"
    "0e00030000000000010000000f00050005000000040000006d61696e0000000010000600040000001100000001000000010000"
    "000100000047000400090000000b00000019000000130002000200000021000300030000000200000015000400060000002000"
    "000000000000170004000700000006000000030000002b0004000600000008000000010000002c000600070000000900000008"
    "000000080000000800000036000500020000000400000000000000030000"
    "00f800020005000000fd00010038000100")


class Probe:
    def __init__(self) -> None:
        self.vk = C.CDLL("libvulkan.so.1")
        for name, args in (("vkCreateInstance", [P, P, P]), ("vkEnumeratePhysicalDevices", [P, P, P]),
                           ("vkGetPhysicalDeviceQueueFamilyProperties", [P, P, P]), ("vkCreateDevice", [P, P, P, P]),
                           ("vkDestroyDevice", [P, P]), ("vkCreateShaderModule", [P, P, P, P]),
                           ("vkCreatePipelineLayout", [P, P, P, P]),
                           ("vkCreateComputePipelines", [P, U64, U32, P, P, P])):
            getattr(self.vk, name).argtypes = args
        self.out: dict[str, float] = {}
        self.t0 = time.perf_counter()

    def lap(self, name: str, t: float) -> None:
        self.out[name] = (time.perf_counter() - t) * 1e3

    def at(self, name: str) -> None:
        self.out[name] = (time.perf_counter() - self.t0) * 1e3

    def instance(self, tag: str) -> Any:
        h, t = P(), time.perf_counter()
        assert self.vk.vkCreateInstance(C.byref(InstanceInfo(sType=1)), None, C.byref(h)) == 0
        self.lap(tag, t)
        return h

    def device(self, instance: Any, tag: str) -> Any:
        n = U32()
        self.vk.vkEnumeratePhysicalDevices(instance, C.byref(n), None)
        gpus = (P * n.value)()
        self.vk.vkEnumeratePhysicalDevices(instance, C.byref(n), gpus)
        nq = U32()
        self.vk.vkGetPhysicalDeviceQueueFamilyProperties(gpus[0], C.byref(nq), None)
        families = (U32 * (6 * nq.value))()  # VkQueueFamilyProperties: 6 uint32, queueFlags first
        self.vk.vkGetPhysicalDeviceQueueFamilyProperties(gpus[0], C.byref(nq), families)
        family = next(i for i in range(nq.value) if families[6 * i] & 2)  # VK_QUEUE_COMPUTE_BIT
        prio = C.c_float(1.0)
        queue = QueueInfo(sType=2, family=family, count=1, prio=C.pointer(prio))
        d, t = P(), time.perf_counter()
        assert self.vk.vkCreateDevice(gpus[0], C.byref(DeviceInfo(sType=3, nq=1, q=C.pointer(queue))), None,
                                      C.byref(d)) == 0
        self.lap(tag, t)
        return d

    def pipeline(self, device: Any, tag: str) -> None:
        t = time.perf_counter()
        code = C.create_string_buffer(EMPTY_SPIRV, len(EMPTY_SPIRV))
        module, layout, pipe = U64(), U64(), U64()
        assert self.vk.vkCreateShaderModule(device, C.byref(ModuleInfo(sType=16, size=len(EMPTY_SPIRV),
                                                                       code=C.cast(code, P))), None, C.byref(module)) == 0
        assert self.vk.vkCreatePipelineLayout(device, C.byref(LayoutInfo(sType=30)), None, C.byref(layout)) == 0
        info = PipelineInfo(sType=29, stage=StageInfo(sType=18, stage=0x20, module=module.value, name=b"main"),
                            layout=layout.value, bi=-1)
        assert self.vk.vkCreateComputePipelines(device, 0, 1, C.byref(info), None, C.byref(pipe)) == 0
        self.lap(tag, t)

    def wgpu_chain(self) -> None:
        """wgpu's instance, enumeration and device request through the webgpu backend's native start."""
        from litegpu_webgpu import _adapters as A

        t = time.perf_counter()
        A._native_start(A._native_prepare())
        self.lap("wgpu instance+enumeration", t)
        A._native_device()
        assert "device" in A._native, "no native device (nothing stored yet: run a webgpu start first)"
        self.out["wgpu device"] = A.PROBE_MS["native device (probe)"]
        self.at("wgpu device ready at")


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in MODES:
        sys.exit(f"usage: vk_device_probe.py {{{'|'.join(MODES)}}}")
    if mode != "devices":
        import litegpu_webgpu._adapters  # noqa: F401 - imported before the clock starts
    p = Probe()
    if mode == "devices":
        i = p.instance("instance 1")
        d1 = p.device(i, "device 1")
        p.pipeline(d1, "pipeline on device 1")
        p.pipeline(d1, "another pipeline on device 1")
        d2 = p.device(i, "device 2 (device 1 alive)")
        p.pipeline(d2, "pipeline on device 2")
        t = time.perf_counter()
        p.vk.vkDestroyDevice(d1, None)
        p.lap("destroy device 1", t)
        p.device(i, "device 3 (device 1 destroyed)")
        p.device(p.instance("instance 2"), "device on instance 2")
    elif mode == "beside-all":
        side = threading.Thread(target=lambda: (p.device(p.instance("bare instance (thread)"), "bare device (thread)"),
                                                p.at("bare device ready at")))
        side.start()
        p.wgpu_chain()
        side.join()
    else:
        i = p.instance("bare instance")
        if mode in ("after-kept", "after-destroyed"):
            d = p.device(i, "bare device")
            if mode == "after-destroyed":
                p.vk.vkDestroyDevice(d, None)
            p.wgpu_chain()
        elif mode == "beside":
            side = threading.Thread(target=lambda: (p.device(i, "bare device (thread)"), p.at("bare device ready at")))
            side.start()
            p.wgpu_chain()
            side.join()
        else:
            p.wgpu_chain()
    print(mode, " ".join(f"{k}={v:.1f}" for k, v in p.out.items()), flush=True)


if __name__ == "__main__":
    main()
