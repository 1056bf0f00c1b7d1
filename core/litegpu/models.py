"""Real models for tests and benchmarks, fetched on demand into the user cache.

:func:`fetch_mediapipe` gets the MediaPipe 0.10.14 wheel with pip (the wheel
bundles its ``.tflite`` models) and extracts the models under
``<user cache>/litegpu/models/mediapipe-0.10.14``.  Nothing is fetched at import
time; a second call finds the files and does not touch the network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ._errors import LiteGPUError

__all__ = ["MEDIAPIPE_VERSION", "MEDIAPIPE_MODELS", "fetch_mediapipe", "ModelFetchError"]

MEDIAPIPE_VERSION = "0.10.14"

# name -> path inside the wheel.  These are the 14 .tflite files mediapipe 0.10.14 ships.
MEDIAPIPE_MODELS: dict[str, str] = {
    "face_detection_full_range_sparse": "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
    "face_detection_short_range": "mediapipe/modules/face_detection/face_detection_short_range.tflite",
    "face_landmark": "mediapipe/modules/face_landmark/face_landmark.tflite",
    "face_landmark_with_attention": "mediapipe/modules/face_landmark/face_landmark_with_attention.tflite",
    "hand_landmark_full": "mediapipe/modules/hand_landmark/hand_landmark_full.tflite",
    "hand_landmark_lite": "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
    "hand_recrop": "mediapipe/modules/holistic_landmark/hand_recrop.tflite",
    "iris_landmark": "mediapipe/modules/iris_landmark/iris_landmark.tflite",
    "palm_detection_full": "mediapipe/modules/palm_detection/palm_detection_full.tflite",
    "palm_detection_lite": "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
    "pose_detection": "mediapipe/modules/pose_detection/pose_detection.tflite",
    "pose_landmark_full": "mediapipe/modules/pose_landmark/pose_landmark_full.tflite",
    "selfie_segmentation": "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
    "selfie_segmentation_landscape": "mediapipe/modules/selfie_segmentation/selfie_segmentation_landscape.tflite",
}

# Environment variable naming a local mediapipe wheel to extract instead of downloading.
WHEEL_ENV = "LITEGPU_MEDIAPIPE_WHEEL"


class ModelFetchError(LiteGPUError, RuntimeError):
    """The models could not be downloaded or extracted."""


def _default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("litegpu")) / "models" / f"mediapipe-{MEDIAPIPE_VERSION}"


def _paths(root: Path) -> dict[str, Path]:
    return {name: root / rel for name, rel in MEDIAPIPE_MODELS.items()}


def fetch_mediapipe(cache_dir: str | os.PathLike[str] | None = None, *, wheel: str | os.PathLike[str] | None = None,
                    timeout: float = 600.0) -> dict[str, Path]:
    """Return ``{model name: path}`` for the 14 MediaPipe 0.10.14 models, fetching them if needed.

    ``cache_dir`` defaults to ``<user cache>/litegpu/models/mediapipe-0.10.14``.  The
    wheel comes from ``wheel``, else the file named by ``$LITEGPU_MEDIAPIPE_WHEEL``,
    else ``python -m pip download --no-deps mediapipe==0.10.14``.  Raises
    :class:`ModelFetchError` when pip fails or the wheel lacks a model.
    """
    root = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    paths = _paths(root)
    if all(p.is_file() and p.stat().st_size > 0 for p in paths.values()):
        return paths

    wheel = wheel or os.environ.get(WHEEL_ENV) or None
    with tempfile.TemporaryDirectory(prefix="litegpu-mediapipe-") as tmp:
        if wheel is not None:
            wheel_path = Path(wheel)
            if not wheel_path.is_file():
                raise ModelFetchError(f"mediapipe wheel {wheel_path} (from {WHEEL_ENV} or wheel=) does not exist")
        else:
            wheel_path = _pip_download(Path(tmp), timeout)
        _extract(wheel_path, root)
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        raise ModelFetchError(f"{wheel_path.name} does not contain the models {', '.join(missing)}")
    return paths


def _pip_download(dest: Path, timeout: float) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", f"mediapipe=={MEDIAPIPE_VERSION}",
           "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelFetchError(f"could not run {' '.join(cmd)}: {e}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise ModelFetchError(
            f"pip could not download mediapipe=={MEDIAPIPE_VERSION} (exit {proc.returncode}): "
            + " | ".join(tail))
    wheels = sorted(dest.glob("mediapipe-*.whl"))
    if not wheels:
        raise ModelFetchError(f"pip download of mediapipe=={MEDIAPIPE_VERSION} produced no wheel in {dest}")
    return wheels[0]


def _extract(wheel_path: Path, root: Path) -> None:
    """Extract ``mediapipe/modules/**/*.tflite`` from the wheel, each file written
    atomically (temporary name, then rename) so a crash never leaves half a model."""
    try:
        zf = zipfile.ZipFile(wheel_path)
    except (OSError, zipfile.BadZipFile) as e:
        raise ModelFetchError(f"{wheel_path} is not a readable wheel: {e}") from e
    with zf:
        for info in zf.infolist():
            name = info.filename
            if not (name.startswith("mediapipe/modules/") and name.endswith(".tflite")):
                continue
            parts = Path(name).parts
            if ".." in parts or Path(name).is_absolute():
                continue
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + f".part{os.getpid()}")
            with zf.open(info) as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(tmp, target)
