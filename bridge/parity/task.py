"""Answer-level agreement (`--task classify|detect|embed`): does a runtime give
the answers the model gives, whatever its elementwise error?

Each runtime is measured against TF float32 (the reference) and, where the
model ran in float64, against that run too; the verdict is against float64
where there is one:

- classify: every float output [N, C] (C >= 2) is a row of class scores per
  sample. top-1 agreement: the fraction of samples whose top class (in the
  runtime) is the reference's top class (a class tied with the reference's top
  score counts); top-5 overlap: the mean share of the reference's top-5
  classes among the runtime's top 5 (reported). Passes at top-1 >= 0.99.
- detect: decoded boxes, as bridge's YoloDecode gives them: boxes [N,R,4]
  (x_center, y_center, w, h), objectness [N,R], class_probs [N,R,C]. A box's
  class is its most probable one, its score objectness x that probability;
  boxes scoring >= 0.25 go through per-class NMS (IoU 0.45, at most 100 per
  image). A reference box is matched by the runtime's unmatched box of the
  same class with the highest IoU, when that IoU >= 0.5 (greedy, by the
  reference's score). Agreement: matched / max(boxes in the reference, boxes
  in the runtime), so missing and extra boxes both count; the score delta of
  matched boxes is reported. Passes at >= 0.95. Nothing above the score
  threshold on both sides is nothing judged: it fails and says so.
- embed: every float output of rank >= 2 is a set of vectors along its last
  axis; the cosine of each runtime vector with the reference's. Passes when
  the smallest is >= 0.99.

A NaN or Inf in a runtime's answer never agrees. For runtimes judged
elementwise the task rows are reported beside the verdict; a quantized export
(tflite-float16, tflite-dynamic: a runtime with `quantize`), whose elementwise
bounds a float32 export keeps cannot hold, is judged by them instead: an output
past its bound passes only where the task agreement passes, and its row says so
(one with a NaN or Inf where the reference is finite still fails).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bridge.parity.inputs import InputError

TASKS = ("classify", "detect", "embed")
TOP1_MIN = 0.99
BOXES_MIN = 0.95
COSINE_MIN = 0.99
SCORE_THRESHOLD = 0.25
NMS_IOU = 0.45
MATCH_IOU = 0.5
MAX_BOXES = 100
TOP_K = 5
JUDGED_BY_TASK = "judged by task"
THRESHOLDS = {
    "classify": f"top-1 agreement >= {TOP1_MIN:g} (top-5 overlap reported)",
    "detect": (f"matched boxes >= {BOXES_MIN:g} (IoU >= {MATCH_IOU:g} at the same class; scores >= "
               f"{SCORE_THRESHOLD:g}, NMS IoU {NMS_IOU:g}; score delta reported)"),
    "embed": f"smallest cosine >= {COSINE_MIN:g}",
}


# -- the metrics, on numpy arrays ---------------------------------------------
def _rows(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)


def top1_agreement(ref, got) -> float:
    """Share of rows (the last axis holds the classes) where got's top class has
    the reference's top score; a row of got with a NaN or Inf never agrees."""
    r, g = _rows(ref), _rows(got)
    if r.shape != g.shape:
        raise ValueError(f"top-1 agreement: shapes {list(r.shape)} and {list(g.shape)} differ")
    if not len(r):
        return float("nan")
    finite = np.isfinite(g).all(axis=1)
    pick = np.argmax(np.where(np.isfinite(g), g, -np.inf), axis=1)
    agree = finite & (r[np.arange(len(r)), pick] == r.max(axis=1))
    return float(agree.mean())


def topk_overlap(ref, got, k: int = TOP_K) -> float:
    """Mean over rows of |top-k(ref) & top-k(got)| / k (k at most the classes)."""
    r, g = _rows(ref), _rows(got)
    if not len(r):
        return float("nan")
    k = min(k, r.shape[1])
    finite = np.isfinite(g).all(axis=1)
    top_r = np.argsort(-r, axis=1, kind="stable")[:, :k]
    top_g = np.argsort(-np.where(np.isfinite(g), g, -np.inf), axis=1, kind="stable")[:, :k]
    shared = np.array([len(set(a) & set(b)) for a, b in zip(top_r, top_g)], dtype=np.float64) / k
    return float(np.where(finite, shared, 0.0).mean())


def cosines(ref, got) -> np.ndarray:
    """Cosine of each vector (the last axis) of got with the reference's: 1 where
    both are zero, 0 where one is, NaN (which fails) where got is not finite."""
    r, g = _rows(ref), _rows(got)
    if r.shape != g.shape:
        raise ValueError(f"cosine: shapes {list(r.shape)} and {list(g.shape)} differ")
    nr, ng = np.linalg.norm(r, axis=1), np.linalg.norm(g, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.einsum("ij,ij->i", r, g) / (nr * ng)
    c = np.where((nr == 0) & (ng == 0), 1.0, np.where((nr == 0) | (ng == 0), 0.0, c))
    return np.where(np.isfinite(g).all(axis=1), np.clip(c, -1.0, 1.0), np.nan)


def xyxy(boxes) -> np.ndarray:
    """(x_center, y_center, w, h) -> (x0, y0, x1, y1)."""
    b = np.asarray(boxes, dtype=np.float64)
    half = b[..., 2:4] / 2
    return np.concatenate([b[..., :2] - half, b[..., :2] + half], axis=-1)


def iou(a, b) -> np.ndarray:
    """IoU of every box in a [n,4] with every box in b [m,4], both (x0,y0,x1,y1): [n,m]."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=-1)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=-1)
    union = area(a)[:, None] + area(b)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def nms(boxes, scores, threshold: float = NMS_IOU) -> List[int]:
    """Indices kept by greedy non-maximum suppression (highest score first)."""
    order = list(np.argsort(-np.asarray(scores), kind="stable"))
    keep = []
    boxes = np.asarray(boxes, np.float64)
    while order:
        i = order.pop(0)
        keep.append(int(i))
        if order:
            over = iou(boxes[i:i + 1], boxes[order])[0]
            order = [j for j, o in zip(order, over) if not o > threshold]
    return keep


@dataclass
class Detections:
    boxes: np.ndarray       # [k, 4] x0, y0, x1, y1
    scores: np.ndarray      # [k]
    classes: np.ndarray     # [k]
    nonfinite: bool = False  # the decoded outputs held a NaN or Inf


def detect(boxes, objectness, class_probs, threshold: float = SCORE_THRESHOLD, nms_iou: float = NMS_IOU,
           max_boxes: int = MAX_BOXES) -> List[Detections]:
    """Per image: each box at its best class, scored objectness x probability,
    kept at >= threshold, per-class NMS, the best `max_boxes`."""
    b, o, c = (np.asarray(v, np.float64) for v in (boxes, objectness, class_probs))
    out = []
    for n in range(b.shape[0]):
        bad = not (np.isfinite(b[n]).all() and np.isfinite(o[n]).all() and np.isfinite(c[n]).all())
        cls = np.argmax(np.nan_to_num(c[n], nan=-np.inf), axis=-1)
        score = np.nan_to_num(o[n] * c[n][np.arange(len(cls)), cls], nan=-np.inf)
        sel = np.flatnonzero(score >= threshold)
        corners = xyxy(b[n][sel])
        keep = []
        for k in np.unique(cls[sel]):
            idx = np.flatnonzero(cls[sel] == k)
            keep += [int(idx[i]) for i in nms(corners[idx], score[sel][idx], nms_iou)]
        keep = sorted(keep, key=lambda i: -score[sel][i])[:max_boxes]
        out.append(Detections(corners[keep], score[sel][keep], cls[sel][keep], bad))
    return out


@dataclass
class Matching:
    reference: int
    got: int
    matched: int
    ious: List[float] = field(default_factory=list)
    score_deltas: List[float] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        most = max(self.reference, self.got)
        return self.matched / most if most else float("nan")


def match(ref: Sequence[Detections], got: Sequence[Detections], iou_min: float = MATCH_IOU) -> Matching:
    """Greedy matching at the same class, by the reference's score (see the module doc)."""
    m = Matching(0, 0, 0)
    for r, g in zip(ref, got):
        m.reference += len(r.scores)
        m.got += len(g.scores)
        if g.nonfinite:
            m.got = max(m.got, m.reference)  # a NaN anywhere in an image: none of its boxes counts
            continue
        free = np.ones(len(g.scores), bool)
        overlaps = iou(r.boxes, g.boxes)
        for i in np.argsort(-r.scores, kind="stable"):
            cand = np.flatnonzero(free & (g.classes == r.classes[i]))
            if not len(cand):
                continue
            j = cand[np.argmax(overlaps[i, cand])]
            if overlaps[i, j] >= iou_min:
                free[j] = False
                m.matched += 1
                m.ious.append(float(overlaps[i, j]))
                m.score_deltas.append(float(abs(g.scores[j] - r.scores[i])))
    return m


# -- which outputs a task reads -----------------------------------------------
def _float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def outputs_for(task: str, outputs: Mapping[str, np.ndarray]) -> List[str]:
    """The outputs `task` judges (detect: [boxes, objectness, class_probs]);
    InputError naming the outputs when the model has none fit for it."""
    shapes = ", ".join(f"{k} [{','.join(map(str, np.shape(v)))}]" for k, v in outputs.items())
    if task == "classify":
        names = [k for k, v in outputs.items() if _float(v) and np.ndim(v) == 2 and np.shape(v)[1] >= 2]
        if not names:
            raise InputError(f"--task classify: no float output of shape [N, classes] (outputs: {shapes})")
        return names
    if task == "embed":
        names = [k for k, v in outputs.items() if _float(v) and np.ndim(v) >= 2]
        if not names:
            raise InputError(f"--task embed: no float output of rank >= 2 (outputs: {shapes})")
        return names
    if task == "detect":
        return _detector_outputs(outputs, shapes)
    raise InputError(f"--task {task!r}: expected one of {', '.join(TASKS)}")


def _detector_outputs(outputs, shapes) -> List[str]:
    named = [n for n in ("boxes", "objectness", "class_probs") if n in outputs]
    if len(named) == 3:
        b, o, c = (np.shape(outputs[n]) for n in named)
        if len(b) == 3 and b[2] == 4 and o == b[:2] and len(c) == 3 and c[:2] == b[:2]:
            return named
    for b in outputs:  # by shape: [N,R,4], [N,R], [N,R,C]
        sb = np.shape(outputs[b])
        if len(sb) != 3 or sb[2] != 4:
            continue
        o = [k for k, v in outputs.items() if k != b and np.shape(v) == sb[:2]]
        c = [k for k, v in outputs.items() if k != b and np.ndim(v) == 3 and np.shape(v)[:2] == sb[:2]]
        if len(o) == 1 and len(c) == 1:
            return [b, o[0], c[0]]
    raise InputError(f"--task detect: needs decoded outputs boxes [N,R,4] (x, y, w, h), objectness [N,R] and "
                     f"class_probs [N,R,C] (bridge's YoloDecode; a built-in yolo with --config decode=true); "
                     f"outputs: {shapes}")


# -- agreement of one runtime ---------------------------------------------------
@dataclass
class Agreement:
    """One runtime's answers against one judge on one output (or the detector's three)."""
    task: str
    output: str
    against: str            # the reference runtime, or tf-float64
    metric: str             # top-1 | matched boxes | min cosine
    value: float
    threshold: float
    extra: Dict[str, float] = field(default_factory=dict)   # top-5 overlap, box counts, score deltas, mean cosine
    note: str = ""

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.value) and self.value >= self.threshold)

    def to_json(self) -> dict:
        num = lambda v: float(v) if np.isfinite(v) else None
        return {"task": self.task, "output": self.output, "against": self.against, "metric": self.metric,
                "value": num(self.value), "threshold": self.threshold, "passed": self.passed,
                **{k: num(v) if isinstance(v, float) else v for k, v in self.extra.items()}, "note": self.note}


def agreements(task: str, names: Sequence[str], got: Mapping[str, np.ndarray], judge: Mapping[str, np.ndarray],
               against: str) -> List[Agreement]:
    missing = [n for n in names if n not in got]
    if missing:
        return [Agreement(task, ",".join(names), against, "-", float("nan"), 0.0, note=f"no output {missing[0]!r}")]
    shapes = [n for n in names if np.shape(got[n]) != np.shape(judge[n])]
    if shapes:
        n = shapes[0]
        return [Agreement(task, n, against, "-", float("nan"), 0.0,
                          note=f"shape {list(np.shape(got[n]))}, the judge's {list(np.shape(judge[n]))}")]
    if task == "classify":
        return [Agreement(task, n, against, "top-1", top1_agreement(judge[n], got[n]), TOP1_MIN,
                          {"top5_overlap": topk_overlap(judge[n], got[n]), "samples": int(_rows(judge[n]).shape[0])})
                for n in names]
    if task == "embed":
        out = []
        for n in names:
            c = cosines(judge[n], got[n])
            value = float(np.nan if np.isnan(c).any() or not c.size else c.min())
            out.append(Agreement(task, n, against, "min cosine", value, COSINE_MIN,
                                 {"mean_cosine": float(np.nanmean(c)) if c.size and not np.isnan(c).all()
                                  else float("nan"), "vectors": int(c.size)},
                                 note="a NaN or Inf" if np.isnan(c).any() else ""))
        return out
    ref_d, got_d = detect(*(judge[n] for n in names)), detect(*(got[n] for n in names))
    m = match(ref_d, got_d)
    note = ("no box scores >= %g on either side: nothing to judge" % SCORE_THRESHOLD if not max(m.reference, m.got)
            else "a NaN or Inf in the decoded outputs" if any(d.nonfinite for d in got_d) else "")
    return [Agreement(task, "+".join(names), against, "matched boxes", m.agreement, BOXES_MIN,
                      {"boxes_reference": m.reference, "boxes_runtime": m.got, "matched": m.matched,
                       "mean_iou": float(np.mean(m.ious)) if m.ious else float("nan"),
                       "max_score_delta": float(max(m.score_deltas)) if m.score_deltas else float("nan")}, note)]


# -- the run's task report ------------------------------------------------------
@dataclass
class TaskReport:
    task: str
    reference: str = ""
    names: List[str] = field(default_factory=list)           # the outputs judged
    rows: Dict[str, List[Agreement]] = field(default_factory=dict)   # runtime -> its agreements
    by_task: Dict[str, str] = field(default_factory=dict)    # runtime -> why it is judged by the task

    def __post_init__(self):
        if self.task not in TASKS:
            raise InputError(f"--task {self.task!r}: expected one of {', '.join(TASKS)}")

    def start(self, reference: str, outputs: Mapping[str, np.ndarray]) -> None:
        """The reference's outputs are known: which ones the task reads (InputError if none fit)."""
        self.reference = reference
        self.names = outputs_for(self.task, outputs)

    def verdicts(self, runtime: str) -> List[Agreement]:
        """The agreements that judge: against float64 where measured, else the reference."""
        rows = self.rows.get(runtime, [])
        f64 = [a for a in rows if a.against != self.reference]
        return f64 or rows

    def attach(self, res, outputs: Mapping[str, np.ndarray], reference: Optional[Mapping[str, np.ndarray]],
               truth: Optional[Mapping[str, np.ndarray]], quantize: Optional[str] = None) -> None:
        """Measures `res` (a runner.RuntimeResult, its comparisons made) against
        the reference's outputs and float64's; a quantized runtime's outputs past
        their bound are then judged by the task."""
        from bridge.parity.truth import NAME as FLOAT64
        if not self.names:
            return
        rows = []
        if reference is not None:
            rows += agreements(self.task, self.names, outputs, reference, self.reference)
        if truth is not None:
            rows += agreements(self.task, self.names, outputs, truth, FLOAT64)
        self.rows[res.name] = rows
        if quantize and quantize != "none":
            self._judge(res, quantize)

    def _judge(self, res, quantize: str) -> None:
        verdicts = self.verdicts(res.name)
        ok = bool(verdicts) and all(a.passed for a in verdicts)
        said = "; ".join(f"{a.metric} {a.value:.4g} {'>=' if a.passed else '<'} {a.threshold:g}" for a in verdicts)
        covered = set(n for a in verdicts for n in a.output.split("+"))
        why = f"{quantize}-quantized: elementwise bounds cannot hold"
        for name, c in list(res.outputs.items()):
            if c.passed or name not in covered or c.note.startswith("shape") or c.nonfinite:
                continue  # a NaN or Inf never passes, whatever the answers around it
            self.by_task[res.name] = why
            note = f"past its bound ({why}); {JUDGED_BY_TASK} vs {verdicts[0].against}: {said}"
            res.outputs[name] = dataclasses.replace(c, passed=ok, status=JUDGED_BY_TASK, note=note)

    def to_json(self) -> dict:
        return {"task": self.task, "outputs": list(self.names), "threshold": THRESHOLDS[self.task],
                "judged_by_task": dict(self.by_task),
                "runtimes": {k: [a.to_json() for a in v] for k, v in self.rows.items()}}

    def table(self, colour: Optional[bool] = None) -> str:
        from bridge.table import render
        headers = ["runtime", "task", "output", "against", "metric", "value", "threshold", "also", "verdict"]
        rows, paints = [], []
        for runtime, agreements_ in self.rows.items():
            judging = set(id(a) for a in self.verdicts(runtime))
            for a in agreements_:
                also = ", ".join(f"{k} {_fmt(v)}" for k, v in a.extra.items())
                if id(a) not in judging:
                    verdict, paint = "-", "dim"
                elif runtime in self.by_task:
                    verdict = ("pass" if a.passed else "FAIL") + f" (judges it: {self.by_task[runtime]})"
                    paint = "green" if a.passed else "red"
                else:
                    verdict = ("agrees" if a.passed else "DISAGREES") + " (informational: judged elementwise)"
                    paint = "green" if a.passed else "yellow"
                if a.note:
                    verdict += f"; {a.note}"
                rows.append([runtime, a.task, a.output, a.against, a.metric, a.value, a.threshold, also, verdict])
                paints.append([None] * 8 + [paint])
        if not rows:
            return f"task {self.task}: no runtime measured"
        tail = "".join(f"\n{name}: outputs past their elementwise bound are judged by the task ({why})"
                       for name, why in self.by_task.items())
        return (f"task {self.task}: {THRESHOLDS[self.task]}\n"
                + render(headers, rows, paints, colour=colour, align="lllllrrll") + tail)


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
