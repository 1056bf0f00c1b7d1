"""Image preprocessing for ``litegpu run/diff/benchmark/eval`` and ``litegpu batch``: loading,
resizing, normalising, quantizing, and the bits of TFLite model metadata (``TFLITE_METADATA``) that
say how.  Every command prepares the bundled MediaPipe models as MediaPipe does
(:mod:`litegpu.mediapipe`: letterbox, value range; :meth:`Preprocess.for_model` decides, and
``litegpu batch`` uses the very same :class:`Preprocess` on its workers).

Images are read with Pillow (optional) or from ``.npy`` arrays (HxW or HxWxC, uint8 or
float, RGB order), so tests and headless setups need no imaging library.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .._image import resize
from ._common import CliError

__all__ = ["ModelMetadata", "read_metadata", "Preprocess", "PreprocessOptions", "add_image_args", "ImageInputs",
           "load_image", "resize", "list_images", "IMAGE_EXTS"]

IMAGE_EXTS = (".npy", ".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".pgm", ".tif", ".tiff")


# --------------------------------------------------------------------------- TFLite metadata


@dataclass
class ModelMetadata:
    """What ``eval`` can use from the metadata flatbuffer: normalisation of the first input,
    its colour space, and the label file of the first output (from the model's zip)."""

    mean: list[float] | None = None
    std: list[float] | None = None
    color_space: str | None = None  # "RGB" | "GRAYSCALE"
    labels: list[str] | None = None
    name: str | None = None


class _Table:
    """Read-only access to one flatbuffer table by field slot (``vtable`` index)."""

    def __init__(self, buf: bytearray, pos: int):
        import flatbuffers.table

        self.t = flatbuffers.table.Table(buf, pos)

    def _off(self, slot: int) -> int:
        return self.t.Offset(4 + 2 * slot)

    def scalar(self, slot: int, kind: Any, default: Any = 0) -> Any:
        o = self._off(slot)
        return self.t.Get(kind, o + self.t.Pos) if o else default

    def string(self, slot: int) -> str | None:
        o = self._off(slot)
        return self.t.String(o + self.t.Pos).decode("utf-8", "replace") if o else None

    def table(self, slot: int) -> _Table | None:
        o = self._off(slot)
        return _Table(self.t.Bytes, self.t.Indirect(o + self.t.Pos)) if o else None

    def tables(self, slot: int) -> list[_Table]:
        o = self._off(slot)
        if not o:
            return []
        start = self.t.Vector(o)
        return [_Table(self.t.Bytes, self.t.Indirect(start + 4 * k)) for k in range(self.t.VectorLen(o))]

    def floats(self, slot: int) -> list[float] | None:
        o = self._off(slot)
        if not o:
            return None
        n = self.t.VectorLen(o)
        start = self.t.Vector(o)
        return [float(x) for x in np.frombuffer(bytes(self.t.Bytes[start:start + 4 * n]), dtype="<f4")]


def read_metadata(model: Any, data: bytes | None = None) -> ModelMetadata:
    """Parse ``TFLITE_METADATA`` (tflite-support's metadata schema) where present.

    Field slots follow that schema: ModelMetadata.subgraph_metadata=3;
    SubGraphMetadata.input_tensor_metadata=2, output_tensor_metadata=3;
    TensorMetadata.content=3, process_units=4, associated_files=6;
    Content.content_properties_type/content_properties=0/1 (ImageProperties=2,
    color_space=0); ProcessUnit.options_type/options=0/1 (NormalizationOptions=1:
    mean=0, std=1); AssociatedFile.name=0, type=2 (TENSOR_AXIS_LABELS=2).
    Anything malformed yields an empty result: metadata is advice, never required.
    """
    import flatbuffers.number_types as nt

    md = ModelMetadata()
    raw = (getattr(model, "metadata", None) or {}).get("TFLITE_METADATA")
    if not raw:
        return md
    try:
        buf = bytearray(raw)
        root = int.from_bytes(buf[0:4], "little")
        top = _Table(buf, root)
        md.name = top.string(0)
        subs = top.tables(3)
        if not subs:
            return md
        sub = subs[0]
        ins = sub.tables(2)
        if ins:
            tm = ins[0]
            content = tm.table(3)
            if content is not None and content.scalar(0, nt.Uint8Flags) == 2:
                props = content.table(1)
                if props is not None:
                    md.color_space = {1: "RGB", 2: "GRAYSCALE"}.get(props.scalar(0, nt.Int8Flags))
            for pu in tm.tables(4):
                if pu.scalar(0, nt.Uint8Flags) == 1:
                    opts = pu.table(1)
                    if opts is not None:
                        md.mean, md.std = opts.floats(0), opts.floats(1)
        outs = sub.tables(3)
        label_file = None
        if outs:
            for af in outs[0].tables(6):
                if af.scalar(2, nt.Int8Flags) == 2:
                    label_file = af.string(0)
                    break
        if label_file and data is not None:
            md.labels = _zip_member_lines(data, label_file)
    except Exception:  # noqa: BLE001 - malformed metadata: ignore, as LiteRT's tools do
        return ModelMetadata()
    return md


def _zip_member_lines(data: bytes, name: str) -> list[str] | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            text = zf.read(name).decode("utf-8", "replace")
    except (zipfile.BadZipFile, KeyError, OSError):
        return None
    return [line.strip() for line in text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- images


def list_images(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        raise CliError(f"--images: not a directory: {directory}")
    return sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTS)


def load_image(path: Path, data: bytes | None = None) -> np.ndarray:
    """HxWxC array (uint8 or float) in RGB order; .npy files are taken as they are.

    ``data``: the file's bytes when they were read elsewhere (``litegpu batch`` reads on Ray workers,
    from Parquet cells); ``path`` then only names the image in messages and picks the format.
    """
    path = Path(path)
    src: Any = path if data is None else io.BytesIO(data)
    is_npy = path.suffix.lower() == ".npy" or (data is not None and data[:6] == b"\x93NUMPY")
    if is_npy:
        try:
            a = np.load(src, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise CliError(f"cannot read image {path}: {e}") from None
        if a.ndim == 2:
            a = a[:, :, None]
        if a.ndim == 4 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 3:
            raise CliError(f"image {path} has shape {a.shape}; expected HxW or HxWxC")
        return a
    try:
        from PIL import Image
    except ImportError:
        raise CliError(f"reading {path.suffix} images needs Pillow (pip install pillow); .npy images need "
                       "nothing") from None
    try:
        with Image.open(src) as im:
            return np.asarray(im.convert("RGB"))
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise CliError(f"cannot read image {path}: {e}") from None


def _floats(text: str | None, what: str) -> list[float] | None:
    if text is None:
        return None
    try:
        return [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise CliError(f"--{what} expects comma-separated numbers, got {text!r}") from None


@dataclass
class PreprocessOptions:
    """The preprocessing flags (see :func:`add_image_args`) outside argparse: what
    :meth:`Preprocess.for_input` reads; ``None`` leaves mean/std to the model's metadata."""

    mean: str | None = None
    std: str | None = None
    bgr: bool = False
    resize: str = "bilinear"
    size: str | None = None

    @classmethod
    def from_args(cls, args: Any) -> PreprocessOptions:
        """The flags from a command's ``args``; a flag the command lacks keeps its default."""
        d = cls()
        return cls(**{k: getattr(args, k, getattr(d, k)) for k in ("mean", "std", "bgr", "resize", "size")})


def add_image_args(p: Any) -> None:
    """The preprocessing flags of every command that takes images (run, diff, benchmark, eval, batch);
    every one of them letterboxes the bundled MediaPipe models (:meth:`Preprocess.for_model`)."""
    note = "; the bundled MediaPipe models are letterboxed to their input range as MediaPipe does"
    g = p.add_argument_group(f"image preprocessing (flags win over the model's metadata{note})")
    g.add_argument("--mean", metavar="M[,M,M]", help="per-channel mean subtracted from 0..255 pixels")
    g.add_argument("--std", metavar="S[,S,S]", help="per-channel divisor applied after the mean")
    g.add_argument("--bgr", action="store_true", help="feed channels in BGR order (default RGB)")
    g.add_argument("--resize", choices=("bilinear", "nearest"), default="bilinear",
                   help="resize method to the model's input size (default bilinear)")
    g.add_argument("--size", metavar="HxW", help="check that the model input is HxW")


@dataclass
class Preprocess:
    """How an image becomes the model's input tensor."""

    height: int
    width: int
    channels: int
    dtype: np.dtype
    mean: list[float] | None
    std: list[float] | None
    bgr: bool
    resize: str
    quant: tuple[float, int] | None
    source: str  # where mean/std came from: flags | metadata | none
    #: a bundled MediaPipe model's input value range: images are letterboxed into it (aspect kept,
    #: padded) as MediaPipe's graphs do, instead of resized and normalised
    letterbox: tuple[float, float] | None = None

    @classmethod
    def for_model(cls, model_path: str, detail: dict[str, Any], args: Any, md: ModelMetadata) -> Preprocess:
        """:meth:`for_input`, plus the letterbox of a bundled MediaPipe detector or segmenter (by
        file name) unless --mean/--std are given: what every command that takes images uses."""
        from .. import mediapipe

        pre = cls.for_input(detail, args, md)
        if args.mean is None and args.std is None:
            spec = mediapipe.detector_for(model_path)
            value_range = spec.input_range if spec is not None else mediapipe.segmenter_for(model_path)
            if value_range is not None:
                pre = replace(pre, letterbox=(float(value_range[0]), float(value_range[1])))
        return pre

    @classmethod
    def for_input(cls, detail: dict[str, Any], args: Any, md: ModelMetadata) -> Preprocess:
        shape = [int(s) for s in detail["shape"]]
        if len(shape) != 4:
            raise CliError(f"input {detail['name']!r} has shape {shape}; image models take NHWC (rank 4) inputs")
        _, h, w, c = shape
        if args.size:
            try:
                hh, ww = (int(x) for x in args.size.lower().split("x"))
            except ValueError:
                raise CliError(f"--size expects HxW, got {args.size!r}") from None
            if (hh, ww) != (h, w):
                raise CliError(f"--size {args.size} differs from the model input {h}x{w}")
        mean, std = _floats(args.mean, "mean"), _floats(args.std, "std")
        source = "flags"
        if mean is None and std is None:
            if md.mean is not None or md.std is not None:
                mean, std, source = md.mean, md.std, "metadata"
            else:
                source = "none"
        for vals, what in ((mean, "mean"), (std, "std")):
            if vals is not None and len(vals) not in (1, c):
                raise CliError(f"--{what} has {len(vals)} values; the input has {c} channels")
        if std is not None and any(s == 0 for s in std):
            raise CliError("--std values must be non-zero")
        q = detail.get("quantization") or (0.0, 0)
        quant = (float(q[0]), int(q[1])) if q and q[0] else None
        return cls(h, w, c, np.dtype(detail["dtype"]), mean, std, bool(args.bgr), args.resize, quant, source)

    def describe(self) -> dict[str, Any]:
        if self.letterbox is not None:
            return {"size": [self.height, self.width], "letterbox": True, "range": list(self.letterbox),
                    "normalization_from": "mediapipe graph"}
        return {"size": [self.height, self.width], "channels": self.channels, "dtype": str(self.dtype),
                "mean": self.mean, "std": self.std, "channel_order": "BGR" if self.bgr else "RGB",
                "resize": self.resize, "normalization_from": self.source,
                "input_quantization": list(self.quant) if self.quant else None}

    def input_from(self, a: np.ndarray) -> np.ndarray:
        """The model input for an array read from a file: an array that already has the input's
        shape (with or without its batch dimension of 1) and dtype is the tensor itself, given as
        ``litegpu run --input`` would take it; anything else is an image and goes through ``self``."""
        shape = (1, self.height, self.width, self.channels)
        if a.dtype == self.dtype and tuple(a.shape) in (shape, shape[1:]):
            return a.reshape(shape)
        if a.ndim == 2:
            a = a[:, :, None]
        if a.ndim == 4 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 3:
            raise CliError(f"array of shape {a.shape} is neither the model input {list(shape)} nor an HxW or "
                           "HxWxC image")
        return self(a)

    def __call__(self, img: np.ndarray) -> np.ndarray:
        return self.prepare(img)[0]

    def prepare(self, img: np.ndarray) -> tuple[np.ndarray, Any]:
        """(model input, where the picture sits in it: a :class:`litegpu.mediapipe.Letterbox`, or None
        when it was resized to fill the input)."""
        if self.letterbox is not None and img.ndim == 3:
            from .. import mediapipe

            x, placement = mediapipe.letterbox(as_pixels(img), (self.height, self.width), self.letterbox)
            return x.astype(self.dtype), placement
        return self._resized(img), None

    def _resized(self, img: np.ndarray) -> np.ndarray:
        if img.shape[2] == 4:
            img = img[:, :, :3]
        if self.channels == 1 and img.shape[2] == 3:
            img = (img.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32))[:, :, None]
        elif self.channels == 3 and img.shape[2] == 1:
            img = np.repeat(img, 3, axis=2)
        if img.shape[2] != self.channels:
            raise CliError(f"image has {img.shape[2]} channels; the model takes {self.channels}")
        if self.bgr:
            img = img[:, :, ::-1]
        img = resize(img, self.height, self.width, self.resize)
        normalized = self.mean is not None or self.std is not None
        x = img.astype(np.float32)
        if normalized:
            x = (x - np.asarray(self.mean if self.mean is not None else [0.0], np.float32)) \
                / np.asarray(self.std if self.std is not None else [1.0], np.float32)
        if self.dtype.kind == "f":
            return x.astype(self.dtype)[None]
        info = np.iinfo(self.dtype)
        if normalized and self.quant is not None:
            scale, zp = self.quant
            q = np.round(x / scale) + zp
        elif self.dtype == np.int8:
            q = np.round(x) - 128  # raw 0..255 pixels shifted into int8
        else:
            q = np.round(x)
        return np.clip(q, info.min, info.max).astype(self.dtype)[None]


def as_pixels(img: np.ndarray) -> np.ndarray:
    """``img`` as uint8 pixels (float arrays clipped to 0..255)."""
    return img if img.dtype == np.uint8 else np.clip(img, 0, 255).astype(np.uint8)


class ImageInputs:
    """``image_loader`` for :func:`~litegpu.cli._common.parse_input_specs`: an image file -> the
    input tensor, through :meth:`Preprocess.for_model` (a bundled MediaPipe detector or segmenter
    without explicit --mean/--std is letterboxed into its value range; any other model is resized
    and normalised by the flags, else the model's metadata).  The pictures and their placement
    are kept (``images[position] = (pixels, Letterbox or None)``) for drawing results on them."""

    def __init__(self, model_path: str, model: Any, data: bytes | None, args: Any):
        from .. import mediapipe

        self.model_path = model_path
        self.options = PreprocessOptions.from_args(args)
        self.metadata = read_metadata(model, data)
        self.detector = mediapipe.detector_for(model_path)
        self.segmenter = mediapipe.segmenter_for(model_path) is not None
        self.images: dict[int, tuple[np.ndarray, Any]] = {}
        self.described: dict[str, Any] | None = None

    def __call__(self, k: int, detail: dict[str, Any], path: Path) -> np.ndarray:
        img = load_image(path)
        pre = Preprocess.for_model(self.model_path, detail, self.options, self.metadata)
        x, placement = pre.prepare(img)
        self.images[k] = (as_pixels(img) if placement is not None else img, placement)
        self.described = pre.describe()
        return x


def softmax_free_scores(out: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """Dequantized scores (ranking is what matters; dequantizing keeps ties where they are)."""
    q = detail.get("quantization") or (0.0, 0)
    a = out.astype(np.float32)
    if q and q[0]:
        a = (a - q[1]) * q[0]
    return a


def topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, largest first; ties go to the lower index."""
    order = np.argsort(-scores, kind="stable")
    return order[:k]
