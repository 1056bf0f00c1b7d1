"""Images in, pictures out: image inputs for run/diff/benchmark, MediaPipe SSD decoding (anchors as
MediaPipe's SsdAnchorsCalculator lays them out, weighted NMS), detections drawn on the picture, eval
detection against a hand-labelled photo, diff with a relative tolerance, --input and --reference litert."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _cli_helpers import cli
from litegpu import mediapipe as mp

ROOT = Path(__file__).resolve().parents[2]
PHOTO = ROOT / "docs" / "assets" / "astronaut.jpg"
FACE_LABEL = ROOT / "tests" / "data" / "astronaut_face.json"


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _hand_label() -> tuple[float, float, float, float]:
    x, y, w, h = json.loads(FACE_LABEL.read_text())["annotations"][0]["bbox"]
    return x / 256, y / 256, (x + w) / 256, (y + h) / 256


# ------------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("name, rows", [("face_detection_short_range", 896), ("face_detection_full_range_sparse", 2304),
                                        ("palm_detection_full", 2016), ("palm_detection_lite", 2016),
                                        ("pose_detection", 2254)])
def test_anchor_counts_match_the_models_rows(name, rows):
    assert mp.DETECTORS[name].num_anchors == rows


def test_anchor_layout_of_blazeface():
    a = mp.ssd_anchors(mp.DETECTORS["face_detection_short_range"])
    # stride 8: 16x16 cells, 2 anchors per cell (aspect 1 + interpolated), row-major from the top-left
    np.testing.assert_allclose(a[:4], [[0.5 / 16, 0.5 / 16]] * 2 + [[1.5 / 16, 0.5 / 16]] * 2)
    # strides 16,16,16 merge: 8x8 cells, 6 anchors each, after the 512 of the first layer
    np.testing.assert_allclose(a[512:518], [[0.5 / 8, 0.5 / 8]] * 6)
    np.testing.assert_allclose(a[-1], [7.5 / 8, 7.5 / 8])


def test_decode_one_anchor_exactly():
    spec = mp.DETECTORS["face_detection_short_range"]
    regs = np.zeros((1, 896, 16), np.float32)
    scores = np.full((1, 896, 1), -50.0, np.float32)
    k = 2  # anchor centre (1.5/16, 0.5/16)
    regs[0, k, :4] = [12.8, -6.4, 25.6, 12.8]  # dx, dy, w, h in input pixels (128)
    regs[0, k, 4:6] = [1.28, 2.56]
    scores[0, k, 0] = 2.0
    (d,) = mp.detect(spec, [regs, scores])
    cx, cy = 1.5 / 16 + 0.1, 0.5 / 16 - 0.05
    np.testing.assert_allclose(d.box, [cx - 0.1, cy - 0.05, cx + 0.1, cy + 0.05], atol=1e-7)
    assert d.score == pytest.approx(1 / (1 + np.exp(-2.0)))
    np.testing.assert_allclose(d.keypoints[0], [1.5 / 16 + 0.01, 0.5 / 16 + 0.02], atol=1e-7)


def test_weighted_nms_averages_overlapping_boxes_by_score():
    a = mp.Detection((0.0, 0.0, 1.0, 1.0), 0.9, np.array([[0.5, 0.5]]))
    b = mp.Detection((0.1, 0.0, 1.1, 1.0), 0.6, np.array([[0.6, 0.5]]))  # IoU 0.82 with a
    c = mp.Detection((2.0, 2.0, 3.0, 3.0), 0.7, np.array([[2.5, 2.5]]))  # apart
    out = mp.weighted_nms([b, c, a], 0.3)
    assert [d.score for d in out] == [0.9, 0.7]
    np.testing.assert_allclose(out[0].box, [0.04, 0.0, 1.04, 1.0])  # (0.9*0 + 0.6*0.1) / 1.5 = 0.04
    np.testing.assert_allclose(out[0].keypoints, [[0.54, 0.5]])
    assert out[1].box == c.box


def test_letterbox_places_and_maps_back():
    img = np.zeros((50, 100, 3), np.uint8)
    x, pl = mp.letterbox(img, (128, 128), (-1.0, 1.0))
    assert x.shape == (1, 128, 128, 3) and x.dtype == np.float32
    assert (pl.left, pl.top, pl.width, pl.height) == (0.0, 32 / 128, 1.0, 64 / 128)
    assert x[0, 0, 0, 0] == -1.0  # padding is the low end of the range
    d = pl.to_image(mp.Detection((0.25, 0.25, 0.75, 0.75), 1.0, np.array([[0.5, 0.5]])))
    np.testing.assert_allclose(d.box, [0.25, 0.0, 0.75, 1.0])
    np.testing.assert_allclose(d.keypoints, [[0.5, 0.5]])


# ------------------------------------------------------------------------------------------ inputs


def test_uint8_and_bare_inputs(tmp_path, mlp_path):
    f = tmp_path / "x.npy"
    np.save(f, np.array([[1, 2, 3, 250]], np.uint8))
    r = cli("run", mlp_path, "--input", f"x={f}", "--json")
    assert r.status == 0, r
    ins = r.json()["inputs"]
    assert ins[0]["source"] == "file" and ins[0]["max"] == 250.0 and ins[0]["dtype"] == "float32"
    r = cli("run", mlp_path, "--input", str(f))
    assert r.status == 2 and "the model has 2 inputs ('x', 'z'); name one: --input NAME=FILE" in r.stderr


def test_run_prints_the_plan(mlp_path):
    r = cli("run", mlp_path)
    assert r.status == 0 and "\nplan: cpu[4]\n" in r.stdout, r


# ------------------------------------------------------------------------------------------ real models



@pytest.mark.mediapipe
def test_run_face_detection_on_the_photo_draws_it(mediapipe_models, tmp_path):
    pytest.importorskip("PIL")
    r = cli("run", "face_detection_short_range", "--input", PHOTO, "--output", tmp_path, "--json")
    assert r.status == 0, r
    res = r.json()
    (det,) = res["detections"]
    assert det["score"] > 0.8 and _iou(det["box_xyxy"], _hand_label()) > 0.7
    assert len(det["keypoints"]) == 6
    pic = Path(res["picture"])
    assert pic == tmp_path / "face_detection_short_range_result.png"
    assert pic.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "regressors.npy").is_file()
    text = cli("run", "face_detection_short_range", "--input", PHOTO).stdout
    assert "plan: folded[" in text and "detections (1, boxes as fractions of the picture" in text


@pytest.mark.mediapipe
def test_run_segmenter_draws_the_mask(mediapipe_models, tmp_path):
    pytest.importorskip("PIL")
    pic = tmp_path / "mask.png"
    r = cli("run", "selfie_segmentation", "--input", PHOTO, "--picture", pic)
    assert r.status == 0, r
    from PIL import Image

    assert Image.open(pic).size == (256, 256)


@pytest.mark.mediapipe
def test_eval_detection_on_the_hand_labelled_photo(mediapipe_models, tmp_path):
    pytest.importorskip("PIL")
    (tmp_path / "astronaut.jpg").write_bytes(PHOTO.read_bytes())
    for name in ("face_detection_short_range", "face_detection_full_range_sparse"):
        r = cli("eval", "detection", name, "--images", tmp_path, "--annotations", FACE_LABEL, "--json")
        assert r.status == 0, r
        assert r.json()["metrics"]["mAP50"] == 1.0, (name, r.json()["metrics"])
    # the palm and pose detectors decode and evaluate end to end (the photo has no labelled hand or body)
    for name, rows in (("palm_detection_full", 2016), ("pose_detection", 2254)):
        r = cli("eval", "detection", name, "--images", tmp_path, "--annotations", FACE_LABEL, "--json")
        assert r.status == 0, r
        assert f"({rows} anchors" in r.json()["preprocessing"]["decoder"]


@pytest.mark.mediapipe
def test_diff_relative_by_default_with_a_photo_against_litert(mediapipe_models):
    pytest.importorskip("ai_edge_litert")
    r = cli("diff", "face_detection_short_range", "-b", "cpu", "--input", PHOTO, "--reference", "litert", "--json")
    assert r.status == 0, r
    res = r.json()
    assert res["reference"] == "litert" and res["metric"] == "max_error_relative" and res["runs"] == 1
    assert res["given_inputs"] == [0] and all(o["max_error_relative"] <= 1e-4 for o in res["outputs"])


@pytest.mark.mediapipe
def test_benchmark_takes_a_photo(mediapipe_models):
    r = cli("benchmark", "face_detection_short_range", "--input", PHOTO, "--num-runs", "1", "--warmup-runs", "0")
    assert r.status == 0, r


@pytest.mark.mediapipe
def test_pose_detector_keypoints_land_on_the_body(mediapipe_models):
    # Hand-placed on the photo: the midpoint of the shoulders is at about (0.45, 0.47); the hips are
    # below the frame.  BlazePose's detector predicts both as keypoints 2 and 0.
    r = cli("run", "pose_detection", "--input", PHOTO, "--json")
    assert r.status == 0, r
    (det,) = r.json()["detections"]
    hips, _, shoulders, _ = det["keypoints"]
    assert abs(shoulders[0] - 0.45) < 0.1 and abs(shoulders[1] - 0.47) < 0.1, shoulders
    assert hips[1] > 0.9, hips
