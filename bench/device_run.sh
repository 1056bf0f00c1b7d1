#!/usr/bin/env bash
# Runs a command on the lent NVIDIA machine with litegpu set up: carried wheels (.whl), the Vulkan/GL
# loaders (.gl, for LiteRT's GPU accelerator and the Vulkan/WebGPU backends), NVIDIA's OpenCL ICD, and the
# MediaPipe models (.models) where litegpu.models looks for them.  Usage: bash bench/device_run.sh CMD...
set -u
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
# other tools (glslc for the Vulkan backend) unpack beside /, never into it
for f in .gl/extra/*.deb; do [ -f "$f" ] && dpkg -x "$f" /opt/gx; done
export PATH=/opt/gx/usr/bin:$PATH LD_LIBRARY_PATH=/opt/gx/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
mkdir -p /etc/OpenCL/vendors
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
# Ray Data (device_prep.sh RAY=1), once its three parts have arrived over three calls
if [ -f .ray1/part ] && [ -f .ray2/part ] && [ -f .ray3/part ] && [ ! -d /tmp/site/ray ]; then
  cat .ray1/part .ray2/part .ray3/part | tar xf - -C /tmp && \
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/.ray-wheels/*.whl
  # Ray's bytecode, once per machine, as a user's pip install has it: without it every new Ray worker
  # compiles Ray's modules on first import, which inflated a fresh instance's first job (issue 18)
  timeout 120 python3 -m compileall -q -j 0 /tmp/site/ray >/dev/null 2>&1 || true
fi
export PYTHONPATH=/tmp/site
pkgs=(. backends/opencl)
for b in backends/webgpu backends/vulkan; do [ -f "$b/pyproject.toml" ] && pkgs+=("$b"); done
rm -rf /tmp/lg; python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade --target /tmp/lg "${pkgs[@]}" || exit 1
export PYTHONPATH=/tmp/lg:/tmp/site
# bytecode, as a user's pip install (which compiles by default) has it: without it every fresh
# process compiles litegpu and its bindings from source (start-up benches measured that, not us)
python3 -m compileall -q -j 0 -x '/ray/' /tmp/lg /tmp/site >/dev/null 2>&1 || true
mkdir -p /tmp/xc/litegpu/models && cp -r .models/mediapipe-0.10.14 /tmp/xc/litegpu/models/
[ -d .models-more/mediapipe-0.10.14 ] && cp -r .models-more/mediapipe-0.10.14 /tmp/xc/litegpu/models/
export XDG_CACHE_HOME=/tmp/xc XDG_RUNTIME_DIR=/tmp/xdg PYTHONUNBUFFERED=1
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$@"
