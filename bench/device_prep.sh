#!/usr/bin/env bash
# Prepares, on this machine, what bench/device_run.sh carries to the lent NVIDIA machine (which has no
# network): wheels for its Python 3.12 (.whl), the Vulkan/GL loader packages (.gl) and glslc (.gl/extra),
# and the MediaPipe models (.models).  All three folders are git-ignored.  Run once per checkout:
#   bash bench/device_prep.sh
# then:  device run  carry=[".whl", ".gl", ".models"]  command="bash bench/device_run.sh python3 bench/gpu.py"
set -euo pipefail
cd "$(dirname "$0")/.."
# Versions as in the project's venv; numpy is left to the device's own (2.x).
WHEELS="ai-edge-litert==2.3.0 backports.strenum==1.2.8 flatbuffers==25.12.19 ml_dtypes==0.6.0 protobuf==7.36.2
tqdm==4.70.1 typing_extensions==4.16.0 pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.8 siphash24==1.9
vulkan==1.3.275.1 wgpu==0.32.0 rendercanvas==2.7.2 cffi==2.1.1 pycparser==3.12 pyfarmhash==0.5.1 tflite==2.18.0
pluggy==1.7.0 PyYAML==6.0.4"
mkdir -p .whl
for w in $WHEELS; do
  name=${w%%==*}
  ls .whl | grep -qi "^$(echo "$name" | tr '-' '_' )-${w##*==}-" 2>/dev/null && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64 \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform any -d .whl "$w"
done
# Loaders for LiteRT's GPU accelerator and the Vulkan/WebGPU backends; glslc beside / (device_run.sh).
if ! ls .gl/*.deb >/dev/null 2>&1; then
  mkdir -p .gl/extra /tmp/amd64/partial
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update -qq
  (cd .gl && apt-get $o download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  (cd .gl/extra && apt-get $o download -qq glslc libshaderc1 2>/dev/null || apt-get $o download -qq glslc)
fi
# The MediaPipe models, from this machine's cache (`litegpu models fetch` fills it).  The device call
# carries at most 64 MiB, so by default only the 7 benchmarked models travel (.models); MODELS=all takes
# every one; MODELS_MORE=1 puts the others in .models-more, for a later call to the same warm machine.
MODELS=${MODELS:-face_detection_short_range,face_landmark,hand_landmark_full,iris_landmark,palm_detection_full,pose_landmark_full,selfie_segmentation}
rm -rf .models .models-more
.venv/bin/python - "$MODELS" "${MODELS_MORE:-}" <<'PY'
import shutil, sys
from pathlib import Path
from litegpu.models import fetch_mediapipe
want, more = sys.argv[1], sys.argv[2]
for name, path in fetch_mediapipe().items():
    chosen = want == "all" or name in want.split(",")
    if not chosen and not more:
        continue
    path = Path(path)
    root = next(q for q in path.parents if q.name == "mediapipe-0.10.14")
    dst = Path(".models" if chosen else ".models-more") / root.name / path.relative_to(root)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, dst)
PY
# Ray Data's wheels for Python 3.12 (RAY=1; about 143 MiB): split in three parts of at most 48 MiB, each
# carried by its own call to one warm machine (a call carries at most 64 MiB; what an earlier call
# carried stays there while the machine is held).  device_run.sh installs them once all three are there:
#   run carry=[".ray1"] "true"; run carry=[".ray2"] "true"; run carry=[".ray3"] "bash bench/device_run.sh ..."
if [ -n "${RAY:-}" ]; then
  mkdir -p .ray-wheels
  for w in ray==2.60.0 pyarrow==26.0.1 pandas==3.1.1 click==8.5.1 filelock==4.3.1 jsonschema==4.26.0 \
           jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py attrs==26.1.0 msgpack==1.2.4 \
           packaging==26.4 requests==2.34.2 certifi idna==3.20 urllib3==2.8.0 charset-normalizer \
           fsspec==2026.9.0 python-dateutil==4.0.0 tzdata==2026.6 six; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform any -d .ray-wheels "$w"
  done
  rm -rf .ray1 .ray2 .ray3 && mkdir -p .ray1 .ray2 .ray3
  tar cf - .ray-wheels | split -b 48M -d -a 1 - .ray-part.
  mv .ray-part.0 .ray1/part && mv .ray-part.1 .ray2/part && mv .ray-part.2 .ray3/part
  [ ! -e .ray-part.3 ] || { echo "Ray's wheels need a fourth part: raise the split" >&2; exit 1; }
fi
du -sh .whl .gl .models .models-more .ray1 .ray2 .ray3 2>/dev/null
