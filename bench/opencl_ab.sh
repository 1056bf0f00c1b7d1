#!/usr/bin/env bash
# Issue 12's OpenCL A/B on one machine, one call (about 1 minute on an H100):
#   bash bench/device_run.sh bash bench/opencl_ab.sh [RUNS]
# 1. bench/cl_launch.py: a launch's host and GPU cost by how it names memory and which kernel it runs;
#    transfers pageable vs pinned;
# 2. bench/gpu_profile.py --backend opencl over the 7 GPU models, each launch's GPU time, PTX counts, and
#    the host-to-host invoke with the transfer switches interleaved run by run on the same interpreter:
#    the defaults, pyopencl's launches instead of ctypes', pinned staging off, pinned staging for writes up
#    to 2 MiB (the default stops at 512 KiB).
set -u
runs=${1:-30}
cd "$(dirname "$0")/.."
M=${MODELS:+--models $MODELS}  # MODELS=a,b: fewer models (a quick check off the GPU)
D=litegpu_opencl._device
echo "## cl_launch"; python3 bench/cl_launch.py ${MODELS:+--launches 100}
echo "## opencl"; python3 bench/gpu_profile.py --backend opencl --runs "$runs" $M --ptx --per-launch \
  --host-ab "$D.CTYPES_LAUNCHES=False" --host-ab "$D.PINNED_TRANSFERS=False" --host-ab "$D.PINNED_WRITE_MAX=2097152"
