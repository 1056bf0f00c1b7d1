"""The Vulkan BackendSpec: availability, devices, options.  Cheap to import: the vulkan binding and
the GPU executor load only when a device is listed or a delegate created (``_device``, ``_delegate``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import litegpu
from litegpu import ConfigError
from litegpu._options import Option

from ._version import VERSION

__all__ = ["VulkanBackend"]


#: A/B switch (``bench/init_ab.py --set litegpu_vulkan._backend.DEVICE_BEFORE_EXECUTOR=False``): the default
#: device's thread (its queries and ``vkCreateDevice``, once the instance is made) starts before the GPU
#: executor's import in ``create_delegate`` instead of after it.  Measured with _device's WARM_PREFETCH and
#: WARM_EARLY_PIPELINES (their comment: all three on against off, H100 +1 / -9 / -28 ms); alone on the 2-core
#: CI machine -2 / -4 ms warm (face_detection_short_range / selfie_segmentation, 6 pairs, load 3: the
#: device's thread waits for the instance either way); not measured alone on a GPU
DEVICE_BEFORE_EXECUTOR = True


def _binding_missing() -> str:
    """Empty when the binding (and libvulkan, which it dlopens) imports, else the reason."""
    try:
        from . import _instance  # noqa: F401 - the binding alone (it dlopens libvulkan)
    except ImportError as e:
        return f"the vulkan Python binding cannot be imported ({e}); pip install vulkan"
    except OSError as e:  # the binding dlopens libvulkan at import
        return f"libvulkan cannot be loaded ({e}); install the Vulkan loader (Debian libvulkan1) and a driver"
    except Exception as e:  # noqa: BLE001 - a broken install must not break available_backends()
        return f"the vulkan binding failed to load: {e!r}"
    return ""


def _start_instance() -> None:
    """The process's shared instance and device list (``_instance``), made here on a thread; a
    failure is left to the device's start, which asks again and raises it typed."""
    from . import _instance

    try:
        _instance.list_devices()
    except Exception:  # noqa: BLE001, S110 - see the docstring
        pass


def _why_unavailable() -> str:
    """Empty when a device can be opened here, else the reason in words.  Never raises.  The
    driver's instance (``vkCreateInstance`` and the device listing, ``_instance``) starts on a
    thread right after the binding's import, beside the import of the rest of the backend and of the
    GPU executor (:func:`litegpu.gpu._probe.probe_beside_executor`): a start pays the longer of the
    two, not their sum."""
    missing = _binding_missing()
    if missing:
        return missing
    from . import _instance

    def list_devices() -> str:
        try:
            _instance.list_devices()  # creates the process's shared instance (kept for the device)
        except litegpu.BackendUnavailableError as e:
            return str(e)
        except Exception as e:  # noqa: BLE001
            return f"Vulkan initialisation failed: {e!r}"
        return ""

    from litegpu.gpu._probe import probe_beside_executor

    try:
        reason = probe_beside_executor(list_devices, "vulkan", modules=(f"{__package__}._device",))
    except Exception as e:  # noqa: BLE001 - as above
        return f"the vulkan backend failed to load: {e!r}"
    if reason:
        return reason
    from . import _device

    if _device.find_glsl_compiler() is None:
        return "no GLSL -> SPIR-V compiler: install glslc (Debian glslc) or glslangValidator (glslang-tools)"
    return ""


class VulkanBackend(litegpu.BackendSpec):
    """``litegpu.load_delegate("vulkan", {...})``."""

    name = "vulkan"
    version = VERSION
    description = "Vulkan compute (GLSL -> SPIR-V via glslc; lavapipe, NVIDIA, AMD, Intel)"
    is_gpu = True
    option_schema = {
        "device": Option("any", 0, doc="index into the device list (discrete GPUs first, then integrated, "
                                       "virtual, CPU such as lavapipe) or a substring of the device name"),
        "memory": Option.enum("auto", "device_local", "host_visible", default="auto",
                              doc="tensor and weight memory: device_local (staging copies recorded in the "
                                  "invoke's command buffer), host_visible (mapped, transfers are memcpy); "
                                  "auto = device_local on discrete GPUs, host_visible on integrated GPUs "
                                  "and CPU drivers such as lavapipe (one memory: a copy would only add work)"),
        "compiler": Option.str(None, nullable=True,
                               doc="GLSL compiler to run (glslc or glslangValidator, name or path); "
                                   "default: whichever is installed, glslc first"),
        # GLSL bakes the work group into the source: every tried size is one more glslc run and
        # pipeline, which made tuning most of a cold prepare (14 s on an H100) for little gain
        "tuning": Option.enum("none", "fast", "exhaustive", default="none",
                              doc="work-group search at prepare: none (the heuristic; the default here: each "
                                  "candidate costs a SPIR-V compile), fast, exhaustive (results are cached)"),
        "half_math": Option.bool(False, doc="fp16 precisions: compute in half (shaderFloat16) instead of "
                                            "float with half buffers (16-bit storage; as accurate as the "
                                            "opencl backend's fp16); ignored for fp32"),
        "fence_timeout": Option.number(60.0, min=0.001,
                                       doc="seconds to wait for the GPU before failing instead of hanging"),
    }

    def availability(self) -> tuple[bool, str]:
        reason = _why_unavailable()
        return (not reason), reason

    def quick_availability(self) -> tuple[bool, str] | None:
        """For ``load_delegate``: the binding imports; the driver's instance starts on a thread here
        (beside the import of the executor that ``create_delegate`` does), and the default device's
        queries and creation go on in the background (``VulkanDevice(background=True)``, on the same
        thread once the instance is made: ``_instance.after_instance``), so that
        a start pays the driver beside the model's read and plan.  A driver that fails raises
        BackendUnavailableError at the delegate's first use (its first ``supports``)."""
        missing = _binding_missing()
        if missing:
            return False, missing
        from . import _instance

        # (the lambda looks _start_instance up when the thread runs: bench/init_timeline.py wraps it)
        _instance.start_thread(lambda: _start_instance())
        return True, ""

    def devices(self) -> list[str]:
        try:
            from ._device import list_devices

            return list_devices()
        except Exception:  # noqa: BLE001
            return []

    def create_delegate(self, options: Mapping[str, Any]) -> litegpu.Delegate:
        if not DEVICE_BEFORE_EXECUTOR:
            from ._delegate import VulkanDelegate  # noqa: F401 - the executor's import first (switch off)
        from ._device import VulkanDevice

        device = options.get("device", 0)
        if device is None:
            device = 0
        if isinstance(device, bool) or not isinstance(device, (int, str)) or (
                isinstance(device, int) and device < 0) or device == "":
            raise ConfigError(f"backends.vulkan.device: expected a device index >= 0 or a name, got {device!r}",
                              path="backends.vulkan.device")
        # the default device starts in the background (see quick_availability); one chosen by index
        # or name is checked here, so that a wrong choice raises at load_delegate
        dev = VulkanDevice(device, memory=options.get("memory", "auto"), compiler=options.get("compiler"),
                           fence_timeout=float(options.get("fence_timeout", 60.0)), background=device == 0)
        from ._delegate import VulkanDelegate  # the GPU executor (its import: the device starts beside it)

        return VulkanDelegate(dev, options)
