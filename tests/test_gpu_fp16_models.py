"""fp16 accuracy of the 13 runnable MediaPipe models against LiteRT fp32.

The target: with the input uniform(-1, 1) (seed 0), every output within 2e-2 of LiteRT's fp32 answer,
measured as max|out - ref| / max|ref|.  Checked here with the reference evaluator simulating fp16
storage (``_reference.evaluate(storage="float16")``: every stored tensor and constant rounded to
float16 except what the ``mixed_precision`` pass keeps in float32; arithmetic in float32, i.e. the
``fp16_fp32acc`` mode's error).  Real fp16 on a device: tests/backends/test_vulkan.py (slow).

pose_landmark_full misses the target on this input whatever fp16-storage policy keeps fp16 for a useful
share of the tensors; docs/gpu-compiler.md §6 gives the analysis.  It is a strict xfail: a change that
meets the target must say so here.  The selfie models meet it at seed 0 in this simulation by the draw
only: their error is the maximum over 65536 pixels of a sigmoid tail (other seeds and lavapipe: up to
4e-2..9e-2, §6), so an unrelated change of rounding order can move them over.
"""

from __future__ import annotations

import numpy as np
import pytest
from litegpu.testing import rel_error
from test_mediapipe_cpu import RUNNABLE

TARGET = 2e-2

#: why a model cannot meet the target on uniform(-1, 1) with fp16 storage (docs/gpu-compiler.md §6)
INFEASIBLE = {
    "pose_landmark_full": "segmentation logits are ill-conditioned (an fp32 input perturbation of 5e-4 moves "
                          "them 3.7e-2); the pose flag is sigmoid(-21.2): its relative error is the logit's "
                          "absolute error (~4e-2 from fp16 features)",
}


def _sim_delegate():
    """A delegate whose partitions are GPU graphs after the passes, run by the reference evaluator with
    fp16 storage."""
    from litegpu import Delegate, DelegateKernel
    from litegpu.gpu._graph import GpuGraph
    from litegpu.gpu._passes import run_passes
    from litegpu.gpu._reference import evaluate
    from litegpu.gpu._runtime import supports

    class Kernel(DelegateKernel):
        def __init__(self, spec):
            self.graph = GpuGraph.from_partition(spec)
            run_passes(self.graph)

        def invoke(self, inputs):
            return evaluate(self.graph, {t: np.asarray(v) for t, v in inputs.items()}, storage="float16")

    class Sim(Delegate):
        name = "fp16-sim"

        def supports(self, node):
            return supports(node)

        def prepare(self, partition):
            return Kernel(partition)

    return Sim()


def _cases():
    for name in RUNNABLE:
        marks = [pytest.mark.xfail(strict=True, reason=INFEASIBLE[name])] if name in INFEASIBLE else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.mediapipe
@pytest.mark.slow
@pytest.mark.parametrize("name", list(_cases()))
def test_mediapipe_fp16_storage_within_target(name, mediapipe_models):
    import litegpu
    from litegpu.testing import run_litegpu, run_litert

    path = str(mediapipe_models[name])
    shapes = [tuple(d["shape"]) for d in litegpu.Interpreter(model_path=path).get_input_details()]
    xs = [np.random.default_rng(0).uniform(-1, 1, s).astype(np.float32) for s in shapes]
    want = run_litert(path, xs, reference=False)  # XNNPACK (fp32) has MediaPipe's transpose-conv op
    got = run_litegpu(path, xs, delegates=[_sim_delegate()])
    errs = [rel_error(g, w) for g, w in zip(got, want, strict=True)]
    assert max(errs) <= TARGET, [f"{e:.2e}" for e in errs]


@pytest.mark.mediapipe
@pytest.mark.slow
def test_pose_flag_not_flushed_to_zero(mediapipe_models):
    """pose_landmark_full's pose flag is sigmoid(-21.2) = 6.3e-10 on the random input: below float16's
    smallest subnormal.  Stored as fp16 it came back as 0 (relative error 1.0, in every fp16 engine);
    kept in float32 (and computed in float32) it keeps its value up to the logit's absolute error."""
    from litegpu.testing import run_litegpu, run_litert

    path = str(mediapipe_models["pose_landmark_full"])
    x = np.random.default_rng(0).uniform(-1, 1, (1, 256, 256, 3)).astype(np.float32)
    want = run_litert(path, [x], reference=False)
    got = run_litegpu(path, [x], delegates=[_sim_delegate()])
    flag = [i for i, w in enumerate(want) if w.size == 1][0]
    assert 0 < want[flag].item() < 6e-8
    assert got[flag].item() > 0
    # its error is the logit's absolute error, a draw (sim 4e-2..9e-2, lavapipe 0.27 / 0.55): not a target
    assert rel_error(got[flag], want[flag]) < 0.5
