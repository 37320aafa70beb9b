"""bridge.parity.task's metrics against values worked by hand, and the planted
bugs each must catch: a swapped class (top-1 and box matching), a box shifted
until its IoU drops below 0.5, a NaN embedding or score that must fail.
numpy only (no TensorFlow): these run in well under a second."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.parity import task as t
from bridge.parity.inputs import InputError


# -- classify ------------------------------------------------------------------
def test_top1_and_top5_by_hand():
    ref = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3], [0.0, 0.0, 1.0], [0.3, 0.3, 0.1]])
    got = np.array([[0.1, 0.6, 0.3], [0.2, 0.5, 0.3], [0.1, 0.0, 0.9], [0.2, 0.4, 0.1]])
    # rows 0 and 2 agree; row 1 flips (planted swap of classes 0 and 1); row 3: the reference ties 0 and 1,
    # got picks 1, which holds the reference's top score: agrees
    assert t.top1_agreement(ref, got) == pytest.approx(3 / 4)
    # top-2 sets: {1,2}/{1,2}, {0,2}/{1,2}, {2,0|1}/{2,0}, {0,1}/{1,0} -> 1, 1/2, ?, 1
    assert t.topk_overlap(ref[:2], got[:2], k=2) == pytest.approx((1 + 0.5) / 2)
    # k above the classes is the classes; every row then shares all of them
    assert t.topk_overlap(ref, got, k=5) == 1.0


def test_top1_over_leading_axes_and_awkward_shapes():
    rng = np.random.default_rng(3)
    for shape in [(1, 2), (7, 11), (2, 3, 5)]:
        ref = rng.normal(size=shape)
        assert t.top1_agreement(ref, ref + 1e-12) == 1.0
        flipped = ref.copy()
        row = flipped.reshape(-1, shape[-1])[0]
        i = np.argmax(row)
        row[i] = row.min() - 1  # planted: the top class of the first row demoted
        rows = int(np.prod(shape[:-1]))
        assert t.top1_agreement(ref, flipped) == pytest.approx((rows - 1) / rows)
    assert np.isnan(t.top1_agreement(np.zeros((0, 4)), np.zeros((0, 4))))


def test_nan_scores_never_agree():
    ref = np.array([[0.1, 0.9], [0.8, 0.2]])
    got = ref.copy()
    got[0, 0] = np.nan  # the argmax would still be class 1 if the NaN were skipped
    assert t.top1_agreement(ref, got) == 0.5
    assert t.topk_overlap(ref, got, k=2) == 0.5


def test_classify_agreement_judges_the_threshold():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(200, 10))
    got = ref.copy()
    got[0, [np.argmax(ref[0]), np.argmin(ref[0])]] = got[0, [np.argmin(ref[0]), np.argmax(ref[0])]]
    (a,) = t.agreements("classify", ["p"], {"p": got}, {"p": ref}, "tf")
    assert a.value == pytest.approx(199 / 200) and a.passed  # 0.995 >= 0.99
    got[1:3] = got[1:3, ::-1]   # two more flips: 197/200 = 0.985 < 0.99
    (a,) = t.agreements("classify", ["p"], {"p": got}, {"p": ref}, "tf")
    assert a.value == pytest.approx(197 / 200) and not a.passed


# -- detect --------------------------------------------------------------------
def test_iou_by_hand():
    a = np.array([[0, 0, 2, 2]])
    b = np.array([[1, 1, 3, 3], [0, 0, 2, 2], [5, 5, 6, 6], [0, 0, 0, 0]])
    np.testing.assert_allclose(t.iou(a, b), [[1 / 7, 1.0, 0.0, 0.0]])
    np.testing.assert_allclose(t.xyxy([[10, 20, 4, 6]]), [[8, 17, 12, 23]])


def test_nms_by_hand():
    boxes = np.array([[0, 0, 4, 4], [1, 0, 5, 4], [10, 10, 12, 12], [0, 0, 4, 4.5]])
    # IoU(0,1) = 12/20 = 0.6 > 0.45: box 1 goes; box 3 overlaps 0 by 16/18: goes; box 2 stays
    assert t.nms(boxes, [0.9, 0.8, 0.7, 0.95]) == [3, 2]
    assert t.nms(boxes, [0.9, 0.8, 0.7, 0.95], threshold=0.95) == [3, 0, 1, 2]
    assert t.nms(np.zeros((0, 4)), []) == []


def _decoded():
    """Two images, rows of (x, y, w, h), objectness, class probs over 3 classes."""
    boxes = np.array([[[10, 10, 8, 8], [40, 40, 10, 10], [11, 10, 8, 8], [70, 20, 6, 6]],
                      [[20, 20, 10, 10], [50, 60, 12, 8], [5, 5, 2, 2], [90, 90, 20, 20]]], float)
    obj = np.array([[0.9, 0.8, 0.7, 0.1], [0.95, 0.6, 0.2, 0.9]])
    cls = np.array([[[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.8, 0.1, 0.1], [0.3, 0.3, 0.9]],
                    [[0.1, 0.1, 0.9], [0.7, 0.2, 0.1], [0.9, 0.1, 0.1], [0.2, 0.6, 0.1]]])
    return boxes, obj, cls


def test_detect_threshold_nms_and_classes_by_hand():
    dets = t.detect(*_decoded())
    # image 0: scores .81 (c0), .64 (c1), .56 (c0, IoU 0.78 with the first: suppressed), .09 (below 0.25)
    np.testing.assert_allclose(dets[0].scores, [0.81, 0.64])
    np.testing.assert_array_equal(dets[0].classes, [0, 1])
    # image 1: .855 (c2), .42 (c0), .18 (below), .54 (c1)
    np.testing.assert_allclose(dets[1].scores, [0.855, 0.54, 0.42])
    np.testing.assert_array_equal(dets[1].classes, [2, 1, 0])


def test_matching_agrees_with_itself_and_catches_planted_bugs():
    boxes, obj, cls = _decoded()
    ref = t.detect(boxes, obj, cls)
    m = t.match(ref, t.detect(boxes + 0.3, obj * 0.99, cls))
    assert (m.reference, m.got, m.matched) == (5, 5, 5) and m.agreement == 1.0
    assert max(m.score_deltas) == pytest.approx(0.855 * 0.01)
    # planted: one box shifted 4 px right: its IoU with the reference box 10x10 at 20,20 is 6*10/(140) < 0.5
    shifted = boxes.copy()
    shifted[1, 0, 0] += 4
    iou = t.iou(t.xyxy(boxes[1, :1]), t.xyxy(shifted[1, :1]))[0, 0]
    assert iou == pytest.approx(60 / 140) and iou < t.MATCH_IOU
    m = t.match(ref, t.detect(shifted, obj, cls))
    assert (m.matched, m.agreement) == (4, 4 / 5)
    # ... and 2 px right (IoU 80/120 = 0.67) still matches
    shifted[1, 0, 0] -= 2
    assert t.match(ref, t.detect(shifted, obj, cls)).matched == 5
    # planted: classes 1 and 2 swapped in image 0's second box: no same-class match for it
    swapped = cls.copy()
    swapped[0, 1] = [0.1, 0.1, 0.8]
    m = t.match(ref, t.detect(boxes, obj, swapped))
    assert m.matched == 4 and m.agreement == pytest.approx(4 / 5)
    # an extra box in the runtime counts against it as much as a missing one
    extra = obj.copy()
    extra[0, 3] = 0.9
    m = t.match(ref, t.detect(boxes, extra, cls))
    assert (m.reference, m.got, m.matched) == (5, 6, 5) and m.agreement == pytest.approx(5 / 6)


def test_detect_nan_and_nothing_to_judge_fail():
    boxes, obj, cls = _decoded()
    names = ["boxes", "objectness", "class_probs"]
    ref = dict(zip(names, (boxes, obj, cls)))
    nan = dict(ref, objectness=obj.copy())
    nan["objectness"][1, 2] = np.nan  # a box below the threshold: a skip-NaN decoder would not see it
    (a,) = t.agreements("detect", names, nan, ref, "tf")
    assert not a.passed and "NaN" in a.note
    (a,) = t.agreements("detect", names, ref, ref, "tf")
    assert a.passed and a.value == 1.0
    dark = dict(ref, objectness=np.zeros_like(obj))
    (a,) = t.agreements("detect", names, dark, dark, "tf")
    assert not a.passed and "nothing to judge" in a.note


def test_detector_outputs_found_by_name_or_shape():
    b, o, c = np.zeros((1, 6, 4)), np.zeros((1, 6)), np.zeros((1, 6, 3))
    assert t.outputs_for("detect", {"class_probs": c, "boxes": b, "objectness": o}) == ["boxes", "objectness",
                                                                                      "class_probs"]
    assert t.outputs_for("detect", {"p": c, "q": o, "r": b}) == ["r", "q", "p"]
    with pytest.raises(InputError, match=r"--task detect: needs decoded outputs .* outputs: y \[1,13,13,255\]"):
        t.outputs_for("detect", {"y": np.zeros((1, 13, 13, 255))})
    with pytest.raises(InputError, match=r"--task classify: no float output of shape \[N, classes\]"):
        t.outputs_for("classify", {"y": np.zeros((1, 4, 4)), "n": np.zeros((3, 1))})


# -- embed ---------------------------------------------------------------------
def test_cosines_by_hand_and_nan_embedding_fails():
    ref = np.array([[1.0, 0.0], [0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])
    got = np.array([[1.0, 1.0], [0.0, 0.0], [6.0, 8.0], [0.0, 0.0]])
    np.testing.assert_allclose(t.cosines(ref, got), [2 ** -0.5, 1.0, 1.0, 0.0])
    rng = np.random.default_rng(5)
    for shape in [(1, 1), (3, 7), (2, 5, 384)]:
        e = rng.normal(size=shape)
        (a,) = t.agreements("embed", ["e"], {"e": e * 1.0001 + 1e-6}, {"e": e}, "tf")
        assert a.passed and a.value > 0.9999
        bad = e.copy()
        bad.reshape(-1)[-1] = np.nan  # planted: one NaN in the last vector
        (a,) = t.agreements("embed", ["e"], {"e": bad}, {"e": e}, "tf")
        assert not a.passed and np.isnan(a.value) and "NaN" in a.note
    e = rng.normal(size=(4, 16))
    turned = e.copy()
    turned[2] = -turned[2]  # one vector pointing the other way: min cosine -1
    (a,) = t.agreements("embed", ["e"], {"e": turned}, {"e": e}, "tf")
    assert a.value == pytest.approx(-1.0) and not a.passed


def test_shape_mismatch_and_unknown_task():
    (a,) = t.agreements("embed", ["e"], {"e": np.zeros((2, 3))}, {"e": np.zeros((2, 4))}, "tf")
    assert not a.passed and "shape [2, 3]" in a.note
    with pytest.raises(InputError, match="--task 'segment': expected one of classify, detect, embed"):
        t.TaskReport("segment")


# -- a quantized runtime judged by the task ----------------------------------------
def _result(name, got, ref):
    from types import SimpleNamespace
    from bridge.parity import compare as cmp
    return SimpleNamespace(name=name, outputs={"p": cmp.compare(got, ref, cmp.Tolerance(2e-2, 2e-2))})


@pytest.mark.parametrize("flip, passes", [(0, True), (3, False)])
def test_quantized_outputs_past_their_bound_are_judged_by_the_task(flip, passes):
    rng = np.random.default_rng(2)
    ref = rng.normal(size=(100, 6)) * 0.1
    ref[np.arange(100), rng.integers(0, 6, 100)] += 3.0   # a clear winner per row
    got = ref + 0.05                                      # past 2e-2 everywhere, the same order
    for i in range(flip):                                  # planted: the winner demoted on `flip` rows
        got[i] = ref[i] - 3.0 * (ref[i] == ref[i].max())
    f64 = ref.astype(np.float64)
    report = t.TaskReport("classify")
    report.start("tf", {"p": ref})
    res = _result("tflite-float16", got, ref)
    assert not res.outputs["p"].passed
    report.attach(res, {"p": got}, {"p": ref}, {"p": f64}, quantize="float16")
    c = res.outputs["p"]
    assert c.passed is passes and c.status == t.JUDGED_BY_TASK and "float16-quantized" in c.note
    assert [a.against for a in report.rows["tflite-float16"]] == ["tf", "tf-float64"]
    assert report.verdicts("tflite-float16")[0].against == "tf-float64"
    assert "judged by the task" in report.table(colour=False)
    # the same numbers for a float runtime: its elementwise FAIL stands, the task only reported
    res = _result("ort", got, ref)
    report.attach(res, {"p": got}, {"p": ref}, {"p": f64})
    assert not res.outputs["p"].passed and res.outputs["p"].status == "FAIL"
    # one NaN in 100 rows leaves top-1 at 0.99, a pass: the output still FAILs on the NaN
    nan = got.copy()
    nan[-1, 0] = np.nan
    res = _result("tflite-dynamic", nan, ref)
    report.attach(res, {"p": nan}, {"p": ref}, {"p": f64}, quantize="dynamic")
    assert report.verdicts("tflite-dynamic")[0].value == pytest.approx(0.99 if not flip else 0.96)
    assert not res.outputs["p"].passed and res.outputs["p"].status == "FAIL"
