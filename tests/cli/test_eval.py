"""``litegpu eval``: exact top-k accuracy and COCO mAP on builder models with known answers.

Classifier: a (1,2,2,3) image is flattened and multiplied by a selection matrix, so the score of
class j is the j-th value of the image (HWC order).  Detector: a (1,4,6,1) "image" holds its own
detections (ymin, xmin, ymax, xmax, class, score per row, the count in the last row) and the model
copies them to TFLite post-processing outputs.  The expected numbers are worked out by hand below.
"""

from __future__ import annotations

import io
import json
import zipfile

import flatbuffers
import numpy as np
import pytest
from _cli_helpers import cli
from litegpu.cli._coco import Detection, evaluate
from litegpu.testing import ModelBuilder

N_CLASSES = 5
# (flattened HWC values of the first 5 positions = class scores, label)
IMAGES = {
    "a.npy": ([9, 1, 2, 3, 0], 0),  # rank 0
    "b.npy": ([5, 7, 1, 0, 0], 0),  # rank 1
    "c.npy": ([1, 2, 8, 9, 0], 1),  # order 3,2,1,0,4 -> rank 2
    "d.npy": ([4, 4, 0, 0, 0], 1),  # tie between 0 and 1: the lower index first -> rank 1
    "e.npy": ([0, 1, 2, 3, 4], 0),  # order 4,3,2,1,0 -> rank 4
    "f.npy": ([0, 0, 0, 6, 0], 3),  # rank 0
}
# top-1: a, f; top-2: + b, d; top-3: + c; e only at rank 5
EXPECTED = {"top1": 2 / 6, "top2": 4 / 6, "top3": 5 / 6}


def _norm_metadata(mean: list[float], std: list[float], label_file: str | None) -> bytes:
    """A TFLITE_METADATA flatbuffer (tflite-support schema) with input normalisation, an RGB image
    content and an output label file."""
    b = flatbuffers.Builder(0)

    def floats(vals):
        b.StartVector(4, len(vals), 4)
        for v in reversed(vals):
            b.PrependFloat32(v)
        return b.EndVector()

    def vec(offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()

    m, s = floats(mean), floats(std)
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, m, 0)
    b.PrependUOffsetTRelativeSlot(1, s, 0)
    norm = b.EndObject()
    b.StartObject(2)  # ProcessUnit: options_type (1 = NormalizationOptions), options
    b.PrependUint8Slot(0, 1, 0)
    b.PrependUOffsetTRelativeSlot(1, norm, 0)
    pu = b.EndObject()
    b.StartObject(2)  # ImageProperties: color_space RGB
    b.PrependInt8Slot(0, 1, 0)
    img = b.EndObject()
    b.StartObject(3)  # Content: ImageProperties (2)
    b.PrependUint8Slot(0, 2, 0)
    b.PrependUOffsetTRelativeSlot(1, img, 0)
    content = b.EndObject()
    pus = vec([pu])
    b.StartObject(7)  # input TensorMetadata
    b.PrependUOffsetTRelativeSlot(3, content, 0)
    b.PrependUOffsetTRelativeSlot(4, pus, 0)
    tin = b.EndObject()
    outs = []
    if label_file:
        name = b.CreateString(label_file)
        b.StartObject(4)  # AssociatedFile: name, description, type (2 = TENSOR_AXIS_LABELS)
        b.PrependUOffsetTRelativeSlot(0, name, 0)
        b.PrependInt8Slot(2, 2, 0)
        af = b.EndObject()
        afs = vec([af])
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(6, afs, 0)
        outs.append(b.EndObject())
    tins, touts = vec([tin]), vec(outs)
    b.StartObject(9)  # SubGraphMetadata
    b.PrependUOffsetTRelativeSlot(2, tins, 0)
    b.PrependUOffsetTRelativeSlot(3, touts, 0)
    sg = b.EndObject()
    sgs = vec([sg])
    mname = b.CreateString("test classifier")
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, mname, 0)
    b.PrependUOffsetTRelativeSlot(3, sgs, 0)
    root = b.EndObject()
    b.Finish(root, file_identifier=b"M001")
    return bytes(b.Output())


def classifier(metadata: bytes | None = None, labels: list[str] | None = None) -> bytes:
    b = ModelBuilder()
    x = b.input("image", (1, 2, 2, 3), "float32")
    flat = b.tensor("flat", (1, 12), "float32")
    b.op("RESHAPE", [x, b.const("shape", np.array([1, 12], np.int32))], [flat], new_shape=[1, 12])
    w = np.zeros((N_CLASSES, 12), np.float32)
    w[np.arange(N_CLASSES), np.arange(N_CLASSES)] = 1.0
    logits = b.tensor("logits", (1, N_CLASSES), "float32")
    b.op("FULLY_CONNECTED", [flat, b.const("w", w), b.const("bias", np.zeros(N_CLASSES, np.float32))], [logits])
    shifted = b.tensor("shifted", (1, N_CLASSES), "float32")
    b.op("ADD", [logits, b.const("zero", np.zeros((1, N_CLASSES), np.float32))], [shifted])
    probs = b.tensor("probs", (1, N_CLASSES), "float32")
    b.op("SOFTMAX", [shifted], [probs], beta=1.0)
    b.output(probs)
    if metadata is not None:
        b.add_metadata("TFLITE_METADATA", metadata)
    data = b.build()
    if labels is not None:  # associated files are zipped onto the end of the model
        z = io.BytesIO()
        with zipfile.ZipFile(z, "w") as zf:
            zf.writestr("labels.txt", "\n".join(labels) + "\n")
        data += z.getvalue()
    return data


def _images(tmp_path, scale=1.0, offset=0.0):
    d = tmp_path / "images"
    d.mkdir()
    for name, (scores, _) in IMAGES.items():
        flat = np.zeros(12, np.float32)
        flat[:5] = np.asarray(scores, np.float32) * scale + offset
        np.save(d / name, flat.reshape(2, 2, 3))
    return d


def _labels(tmp_path, fmt="pairs"):
    f = tmp_path / ("labels.json" if fmt == "json" else "labels.txt")
    if fmt == "pairs":
        f.write_text("".join(f"{n} {lab}\n" for n, (_, lab) in IMAGES.items()))
    elif fmt == "ordered":
        f.write_text("".join(f"{lab}\n" for _, (_, lab) in sorted(IMAGES.items())))
    elif fmt == "names":
        f.write_text("".join(f"{n},class{lab}\n" for n, (_, lab) in IMAGES.items()))
    else:
        f.write_text(json.dumps({n: lab for n, (_, lab) in IMAGES.items()}))
    return f


@pytest.mark.parametrize("fmt", ["pairs", "ordered", "json"])
def test_classification_topk_exact(tmp_path, fmt):
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    r = cli("eval", "classification", model, "--images", _images(tmp_path), "--labels", _labels(tmp_path, fmt),
            "--top-k", "3", "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["images"] == 6 and d["top_k"] == 3
    assert d["accuracy"] == pytest.approx(EXPECTED)
    assert d["reference_accuracy"] is None  # the backend is the cpu itself
    pred = {p["image"]: p["test"] for p in d["predictions"]}
    assert pred["d.npy"] == [0, 1, 2] and pred["e.npy"] == [4, 3, 2]
    assert d["preprocessing"]["normalization_from"] == "none"


def test_classification_vs_reference_on_a_backend(tmp_path, example_backend):
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    r = cli("eval", "classification", model, "--images", _images(tmp_path), "--labels", _labels(tmp_path),
            "--top-k", "3", "--backend", "example", "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["accuracy"] == pytest.approx(EXPECTED)
    assert d["reference_accuracy"] == pytest.approx(EXPECTED)
    assert d["top1_agreement_with_reference"] == 1.0


def test_classification_normalisation_from_flags_and_metadata(tmp_path):
    # pixels stored as 3 * score + 10; (x - 10) / 3 recovers the scores (ranking is what matters,
    # but a wrong mean/std would make ties and order differ: e.g. std -3 reverses everything)
    images = _images(tmp_path, scale=3.0, offset=10.0)
    labels = _labels(tmp_path, "names")
    names = tmp_path / "names.txt"
    names.write_text("".join(f"class{i}\n" for i in range(N_CLASSES)))
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    r = cli("eval", "classification", model, "--images", images, "--labels", labels, "--class-names", names,
            "--top-k", "3", "--mean", "10", "--std", "3", "--json")
    assert r.status == 0, r
    assert r.json()["accuracy"] == pytest.approx(EXPECTED)
    assert r.json()["preprocessing"]["normalization_from"] == "flags"
    r = cli("eval", "classification", model, "--images", images, "--labels", labels, "--class-names", names,
            "--top-k", "3", "--mean", "10", "--std", "-3", "--json")
    assert r.json()["accuracy"]["top1"] != pytest.approx(EXPECTED["top1"])
    # the same from the model's metadata, class names from its zipped label file
    meta_model = tmp_path / "meta.tflite"
    meta_model.write_bytes(classifier(_norm_metadata([10.0], [3.0], "labels.txt"),
                                      [f"class{i}" for i in range(N_CLASSES)]))
    r = cli("eval", "classification", meta_model, "--images", images, "--labels", labels, "--top-k", "3", "--json")
    assert r.status == 0, r
    assert r.json()["accuracy"] == pytest.approx(EXPECTED)
    pre = r.json()["preprocessing"]
    assert pre["normalization_from"] == "metadata" and pre["mean"] == [10.0] and pre["std"] == [3.0]


def test_classification_text_and_errors(tmp_path):
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    images = _images(tmp_path)
    r = cli("eval", "classification", model, "--images", images, "--labels", _labels(tmp_path), "--top-k", "2")
    assert r.status == 0, r
    assert "TOP-1" in r.stdout and "0.3333" in r.stdout and "0.6667" in r.stdout
    r = cli("eval", "classification", model, "--images", tmp_path / "none", "--labels", _labels(tmp_path))
    assert r.status == 2 and "not a directory" in r.stderr
    r = cli("eval", "classification", model, "--images", images, "--labels", tmp_path / "nolabels.txt")
    assert r.status == 2 and "file not found" in r.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("a.npy 99\n")
    r = cli("eval", "classification", model, "--images", images, "--labels", bad)
    assert r.status == 2 and "outside the model's 5 classes" in r.stderr
    bad.write_text("a.npy dog\n")
    r = cli("eval", "classification", model, "--images", images, "--labels", bad)
    assert r.status == 2 and "give --class-names" in r.stderr


# --------------------------------------------------------------------------- detection


def detector() -> bytes:
    b = ModelBuilder()
    x = b.input("image", (1, 4, 6, 1), "float32")
    flat = b.tensor("flat", (1, 24), "float32")
    b.op("RESHAPE", [x, b.const("shape", np.array([1, 24], np.int32))], [flat], new_shape=[1, 24])

    def select(name, positions, shape):
        w = np.zeros((len(positions), 24), np.float32)
        w[np.arange(len(positions)), positions] = 1.0
        t = b.tensor(name, (1, len(positions)), "float32")
        b.op("FULLY_CONNECTED", [flat, b.const(name + "_w", w), b.const(name + "_b", np.zeros(len(positions),
                                                                                              np.float32))], [t])
        if shape == (1, len(positions)):
            return t
        out = b.tensor(name + "_out", shape, "float32")
        b.op("RESHAPE", [t, b.const(name + "_shape", np.array(shape, np.int32))], [out], new_shape=list(shape))
        return out

    boxes = select("boxes", [6 * i + k for i in range(3) for k in range(4)], (1, 3, 4))
    classes = select("classes", [6 * i + 4 for i in range(3)], (1, 3))
    scores = select("scores", [6 * i + 5 for i in range(3)], (1, 3))
    count = select("count", [18], (1,))
    for t in (boxes, classes, scores, count):
        b.output(t)
    return b.build()


def _det_image(dets: list[tuple[float, float, float, float, int, float]]) -> np.ndarray:
    a = np.zeros((4, 6, 1), np.float32)
    for i, d in enumerate(dets):
        a[i, :, 0] = d
    a[3, 0, 0] = len(dets)
    return a


def _xywh_to_row(x, y, w, h, cls, score, size=100.0):
    return (y / size, x / size, (y + h) / size, (x + w) / size, cls, score)


def _coco_case(tmp_path, crowd: bool = False):
    d = tmp_path / "det"
    d.mkdir()
    # image 1: a false positive (0.95) away from everything, and an exact match of A (0.9)
    np.save(d / "img1.npy", _det_image([_xywh_to_row(60, 60, 20, 20, 0, 0.95),
                                        _xywh_to_row(10, 10, 40, 40, 0, 0.9)]))
    # image 2: B found with IoU 1360/1840 = 0.739 (0.8), C exact (class 1, 0.6)
    np.save(d / "img2.npy", _det_image([_xywh_to_row(20, 26, 40, 40, 0, 0.8),
                                        _xywh_to_row(50, 50, 30, 30, 1, 0.6)]))
    anns = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 40, 40], "iscrowd": 0, "area": 1600},
        {"id": 2, "image_id": 2, "category_id": 1, "bbox": [20, 20, 40, 40], "iscrowd": 0, "area": 1600},
        {"id": 3, "image_id": 2, "category_id": 2, "bbox": [50, 50, 30, 30], "iscrowd": 0, "area": 900},
    ]
    if crowd:  # a crowd region over image 1's false positive: it is then ignored, not false
        anns.append({"id": 4, "image_id": 1, "category_id": 1, "bbox": [55, 55, 30, 30], "iscrowd": 1})
    coco = {"images": [{"id": 1, "file_name": "img1.jpg", "width": 100, "height": 100},  # .npy stand-in
                       {"id": 2, "file_name": "img2.npy", "width": 100, "height": 100}],
            "annotations": anns, "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    f = tmp_path / "coco.json"
    f.write_text(json.dumps(coco))
    return d, f


# Category 1: at IoU thresholds .50-.70 both boxes are found: by score FP, TP, TP -> precision
# 0, 1/2, 2/3 at recall 0, 1/2, 1; made monotone: 2/3 everywhere -> AP 2/3.  At .75-.95 the
# 0.739 box is a false positive: precision 1/2 up to recall 1/2 (51 of the 101 points), 0 after
# -> AP 25.5/101.  Category 2: AP 1 at every threshold.
AP1_LOW, AP1_HIGH = 2 / 3, 25.5 / 101
MAP = (5 * AP1_LOW + 5 * AP1_HIGH + 10 * 1.0) / 20
MAP50 = (AP1_LOW + 1.0) / 2
MAP75 = (AP1_HIGH + 1.0) / 2


def test_detection_map_exact(tmp_path):
    model = tmp_path / "det.tflite"
    model.write_bytes(detector())
    images, ann = _coco_case(tmp_path)
    saved = tmp_path / "dets.json"
    r = cli("eval", "detection", model, "--images", images, "--annotations", ann, "--class-offset", "1",
            "--save-detections", saved, "--json")
    assert r.status == 0, r
    m = r.json()["metrics"]
    assert m["mAP"] == pytest.approx(MAP, abs=1e-9)
    assert m["mAP50"] == pytest.approx(MAP50, abs=1e-9)
    assert m["mAP75"] == pytest.approx(MAP75, abs=1e-9)
    assert m["per_category"]["1"]["AP50"] == pytest.approx(AP1_LOW)
    assert m["per_category"]["2"]["AP"] == pytest.approx(1.0)
    assert m["per_threshold"]["0.70"] == pytest.approx((AP1_LOW + 1) / 2)
    assert m["per_threshold"]["0.75"] == pytest.approx((AP1_HIGH + 1) / 2)
    assert m["images"] == 2 and m["detections"] == 4 and m["ground_truth_boxes"] == 3
    rows = json.loads(saved.read_text())
    assert len(rows) == 4
    exact = next(row for row in rows if row["score"] == pytest.approx(0.9))
    assert exact["bbox"] == pytest.approx([10, 10, 40, 40], abs=1e-4) and exact["category_id"] == 1


def test_detection_text(tmp_path):
    model = tmp_path / "det.tflite"
    model.write_bytes(detector())
    images, ann = _coco_case(tmp_path)
    r = cli("eval", "detection", model, "--images", images, "--annotations", ann, "--class-offset", "1")
    assert r.status == 0, r
    assert f"{MAP:.4f}" in r.stdout and f"{MAP50:.4f}" in r.stdout and "mAP@[.5:.95]" in r.stdout


def test_coco_crowd_regions_ignore_detections():
    anns = [
        {"image_id": 1, "category_id": 1, "bbox": [10, 10, 40, 40], "iscrowd": 0},
        {"image_id": 1, "category_id": 1, "bbox": [55, 55, 30, 30], "iscrowd": 1},
        {"image_id": 2, "category_id": 1, "bbox": [20, 20, 40, 40], "iscrowd": 0},
    ]
    dets = [Detection(1, 1, (60, 60, 20, 20), 0.95), Detection(1, 1, (10, 10, 40, 40), 0.9),
            Detection(2, 1, (20, 26, 40, 40), 0.8)]
    m = evaluate([1, 2], anns, dets)
    # low thresholds: TP, TP -> AP 1; high thresholds: TP then FP -> precision 1 up to recall 1/2
    assert m["mAP50"] == pytest.approx(1.0)
    assert m["mAP75"] == pytest.approx(51 / 101)
    assert m["mAP"] == pytest.approx((5 * 1.0 + 5 * 51 / 101) / 10)
    # no detections at all: AP 0; categories without ground truth are left out
    empty = evaluate([1, 2], anns, [Detection(1, 7, (0, 0, 5, 5), 0.5)])
    assert empty["mAP"] == 0.0 and list(empty["per_category"]) == ["1"]


def test_detection_errors(tmp_path):
    model = tmp_path / "det.tflite"
    model.write_bytes(detector())
    images, ann = _coco_case(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text("{\"images\": []}")
    r = cli("eval", "detection", model, "--images", images, "--annotations", bad)
    assert r.status == 2 and "not a COCO annotation file" in r.stderr
    r = cli("eval", "detection", model, "--images", images, "--annotations", ann, "--outputs", "boxes,zebra")
    assert r.status == 2 and "unknown role(s) zebra" in r.stderr
    r = cli("eval", "detection", model, "--images", tmp_path, "--annotations", ann)
    assert r.status == 2 and "none of the 2 images" in r.stderr


def test_classification_png_images_resized(tmp_path):
    """PNG files (Pillow) twice the model's size: every 2x2 block holds one value, so a half-pixel
    bilinear resize gives back exactly the 2x2 image and the accuracy is unchanged."""
    pil = pytest.importorskip("PIL.Image")
    d = tmp_path / "png"
    d.mkdir()
    for name, (scores, _) in IMAGES.items():
        flat = np.zeros(12, np.uint8)
        flat[:5] = scores
        big = flat.reshape(2, 2, 3).repeat(2, axis=0).repeat(2, axis=1)
        pil.fromarray(big, "RGB").save(d / name.replace(".npy", ".png"))
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{n.replace('.npy', '.png')} {lab}\n" for n, (_, lab) in IMAGES.items()))
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    r = cli("eval", "classification", model, "--images", d, "--labels", labels, "--top-k", "3", "--json")
    assert r.status == 0, r
    assert r.json()["accuracy"] == pytest.approx(EXPECTED)


def test_classification_caps_top_k_and_names_labels_without_images(tmp_path):
    model = tmp_path / "cls.tflite"
    model.write_bytes(classifier())
    labels = _labels(tmp_path)
    labels.write_text(labels.read_text() + "missing.npy 1\n")
    r = cli("eval", "classification", model, "--images", _images(tmp_path), "--labels", labels,
            "--top-k", str(N_CLASSES + 3), "--json")
    assert r.status == 0, r
    d = r.json()
    assert d["top_k"] == N_CLASSES and list(d["accuracy"]) == [f"top{k}" for k in range(1, N_CLASSES + 1)]
    assert d["labels_without_image"] == ["missing.npy"]
    assert f"--top-k {N_CLASSES + 3} > the model's {N_CLASSES} classes" in r.stderr
    assert "1 label(s) name no image" in r.stderr and "missing.npy" in r.stderr
