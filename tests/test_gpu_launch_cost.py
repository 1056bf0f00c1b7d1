"""The host's cost of a launch through the API in the plan: a backend tells it (``DeviceInfo.launch_host_us``),
``_cost.profile_for`` carries it (``DeviceCost.launch_host_us``), and the passes that change the number of launches
price each launch at its share of an invoke (``_cost.in_invoke``: the slower of its GPU time and the host's
enqueue), while one launch's variants are still ranked by GPU time (``_cost.estimate``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from litegpu.gpu._cost import PROFILES, choose_conv, conv_candidates, estimate, in_invoke, profile_for
from litegpu.gpu._device import DeviceInfo

H100 = DeviceInfo(api="opencl", name="NVIDIA H100 80GB HBM3", vendor="NVIDIA CUDA", driver_version="580.159.04",
                  fp16=True, max_workgroup_size=1024, compute_units=132)

# a 1x1 conv of 24 -> 96 channels on a 32x32 map and a 3x3 one of 64 -> 64 on 16x16 (conv2d's shape params)
CONVS = [dict(B=1, H=32, W=32, S=24, SRC_S=6, SRC_SG=6, KH=1, KW=1),
         dict(B=1, H=16, W=16, S=16, SRC_S=16, SRC_SG=16, KH=3, KW=3)]


def test_profile_for_carries_the_apis_launch_cost():
    base = profile_for(H100)
    assert base.name == "nvidia" and base.launch_host_us == 0.0  # a recorded replay (Vulkan): the GPU's cost only
    got = profile_for(replace(H100, launch_host_us=12.0))
    assert got.launch_host_us == 12.0 and replace(got, launch_host_us=0.0) == base
    assert all(p.launch_host_us == 0.0 for p in PROFILES.values())  # the calibrations are the GPU's


@pytest.mark.parametrize("host", [0.0, 2.0, 12.0, 40.0])
def test_a_launch_costs_an_invoke_the_slower_of_gpu_and_host(host):
    """GPU time is the host's cost alone (estimate); a launch's share of an invoke is the slower of the two."""
    base = profile_for(H100)
    dev = profile_for(replace(H100, launch_host_us=host))
    for p in CONVS:
        for _, _, w in conv_candidates(p, base, grouped=False):
            us = estimate(w, base)
            assert estimate(w, dev) == us and in_invoke(us, dev) == max(us, host)
    assert in_invoke(5.0, base) == 5.0  # no host cost: the GPU time


def test_one_launchs_variant_is_the_gpus_choice():
    """The host's cost is the same for every variant of one launch: the pick and its estimate are the GPU's."""
    base = profile_for(H100)
    dev = profile_for(replace(H100, launch_host_us=12.0))
    for p in CONVS:
        assert choose_conv(p, dev, False) == choose_conv(p, base, False)


# a launch of each kernel ``launch_work`` prices, at shape params its lowering would give it: kernel -> (params,
# options that select the priced form and are not at their defaults)
_SHAPE = dict(B=1, H=16, W=16, S=8, SRC_S=8, SRC_SG=8, KH=3, KW=3, STRIDE_H=1, STRIDE_W=1, DIL_H=1, DIL_W=1)
PRICED = {
    "conv2d": (_SHAPE, {}),
    "conv2d_tiled": (_SHAPE, {}),
    "depthwise_conv2d": (_SHAPE, {}),
    "pw_dw_conv2d": ({**_SHAPE, "SRC_H": 16, "SRC_W": 16, "MID_S": 16, "HALO_H": 6, "HALO_W": 6, "TILES": 16,
                      "NC": 4, "SC": 4}, {}),
    "dw_pw_conv2d": (_SHAPE, {}),
    "dw_pw_conv2d staged": (_SHAPE, {"stage_p": 8}),
    "dw_pw_small": ({**_SHAPE, "SC": 8}, {}),
    "heads": ({"B": 1, "G0": 4, "SRC_S0": 64, "T0": 1}, {"n": 1}),
    "reduce": ({"B": 1, "H": 1, "W": 1, "S": 8, "SRC_B": 1, "SRC_H": 16, "SRC_W": 16, "SRC_S": 8, "RH": 1, "RW": 1}, {}),
    "binary": ({"B": 1, "H": 16, "W": 16, "S": 8}, {}),
    "se_gate": ({"B": 1, "SRC_S": 8, "SRC_H": 16, "SRC_W": 16, "HID_S": 2, "S": 8}, {}),
}


@pytest.mark.parametrize("name", sorted(PRICED))
def test_a_launch_prices_its_left_out_options_at_its_specs_defaults(name):
    """A launch leaves out the options at its template's defaults (the lowerings drop them): ``launch_work`` prices
    it as the launch with every default of its kernel's spec written out, and not as it prices other values (the
    staged dw_pw_conv2d once read a missing ``block_w`` as 1, its spec's default being 2)."""
    from litegpu.gpu._cost import launch_work
    from litegpu.gpu.kernels import kernel_spec

    kernel = name.split()[0]
    params, form = PRICED[name]
    defaults = {k: o.default for k, o in kernel_spec(kernel).options.items()}
    left_out = launch_work(kernel, form, params)
    assert left_out is not None, f"{name}: not priced"
    assert left_out == launch_work(kernel, {**defaults, **form}, params)
    # None is left out (a lowering drops it from a launch's options)
    assert left_out == launch_work(kernel, {**{k: None for k in defaults if k not in form}, **form}, params)
    if name == "dw_pw_conv2d staged":
        assert defaults["block_w"] == 2 and left_out != launch_work(kernel, {**form, "block_w": 1}, params)



def test_pricing_a_launch_before_the_specs_are_loaded_says_so():
    """The specs reach the cost model with ``litegpu.gpu.ops`` (``_cost.use_specs``): pricing a launch before that
    raises, naming the import, rather than pricing its left-out options at no defaults."""
    import subprocess
    import sys

    code = ("import litegpu.gpu._cost as c\n"
            "try:\n    c.launch_work('conv2d', {}, {})\nexcept RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "import litegpu.gpu.ops" in out.stdout
