"""The README's main job (``make demo`` = ``python -m litegpu.demo``): what a newcomer reads."""

from __future__ import annotations

import pytest
from litegpu.demo import _is_software


@pytest.mark.parametrize(("device", "software"), [
    ("llvmpipe (LLVM 15.0.6, 256 bits) (CPU)", True),  # Mesa lavapipe through vulkan
    ("llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)", True),  # the same through wgpu
    ("pthread-haswell-AMD EPYC (Portable Computing Language)", True),  # PoCL's CPU device
    ("SwiftShader Device (Subzero)", True),
    ("NVIDIA H100 80GB HBM3", False),
    ("NVIDIA H100 80GB HBM3 (NVIDIA CUDA)", False),
    ("AMD Radeon RX 7900 XTX (RADV NAVI31)", False),
])
def test_software_devices_get_the_note(device: str, software: bool) -> None:
    # the demo adds a note under the table for rows run on a CPU implementation of a GPU API, so
    # that their times are not read as GPU speed
    assert _is_software(device) is software
