#!/usr/bin/env bash
# Issue 12's OpenCL A/B on one machine, one call (about 3 minutes on an H100):
#   bash bench/device_run.sh bash bench/opencl_ab.sh [RUNS]
# 1. bench/cl_launch.py: a launch's host and GPU cost by how it names memory; transfers pageable vs pinned;
# 2. bench/gpu_profile.py --backend opencl over the 7 GPU models: today's defaults (with each launch's GPU
#    time and PTX counts), then each kernel switch alone: buffer offsets instead of sub-buffers, work-group
#    size and group index baked into the source, build options; in each, the host switches (pinned
#    transfers, polling the last read instead of waiting on it) interleaved on the same interpreter;
# 3. bench/gpu_profile.py --backend vulkan with each launch's GPU time (the same plan, the other API).
set -u
runs=${1:-30}
cd "$(dirname "$0")/.."
M=${MODELS:+--models $MODELS}  # MODELS=a,b: fewer models (a quick check off the GPU)
P="python3 bench/gpu_profile.py --backend opencl --runs $runs $M"
O=litegpu.gpu._dialects.opencl
D=litegpu_opencl._device
H="--host-ab $D.PINNED_TRANSFERS=True --host-ab $D.POLL_WAIT=True"
echo "## cl_launch"; python3 bench/cl_launch.py ${MODELS:+--launches 100}
echo "## opencl defaults"; $P $H --ptx --per-launch
echo "## opencl $O.OFFSET_ARGS=True"; $P $H --set "$O.OFFSET_ARGS=True"
echo "## opencl $O.GROUP_INDEX=True (and reqd_work_group_size on every kernel)"; $P $H --ptx --set "$O.GROUP_INDEX=True"
echo "## opencl build options -cl-denorms-are-zero"; $P $H --ptx --set "$D.EXTRA_BUILD_OPTIONS='-cl-denorms-are-zero'"
echo "## vulkan"; python3 bench/gpu_profile.py --backend vulkan --runs "$runs" $M --per-launch
