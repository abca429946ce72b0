"""Named rules for a predicted speedup that jumps between neighbouring batch sizes of a plan.

Where a plan's speedup changes by more than ``JUMP`` (10%) from one batch row to the next, the row names what did it
(``jump_rule``). First the decisions:

* **memory** -- the configurations that fit changed (a longer draft, or any, no longer fits the GPUs' memory);
* **drafter switch** -- another drafter wins from this batch on;
* **speculation off** -- D = 0 on one side (speculation stopped paying) while the best D >= 1 moved by <= ``JUMP``;

then the physics, by attribution: the change of log(speedup) = log(AL) + log(plain step) - log(speculative step)
is split over the op classes of both steps (``trtspec.recipes.costmodel.COST_CLASSES``, the draft and the
speculative fixed costs), and the class that moved it most is named with its numbers:

* **kernel switch** -- the measured table of that class grows faster than the size between two ladder points the
  steps cross (``trtspec.recipes.perfdb.PerfDB.switches``: another kernel, tile or algorithm at that size);
* **MoE expert loading** -- a step's routed experts load more distinct experts (or stop, once all are loaded);
* **GEMMs leave the memory-bound regime** -- weight GEMMs grow with the rows B*(1+D) (compute-bound, more M tiles);
* **attention** -- KV reads grow with the requests and the verified rows (tile passes);
* **tensor parallel** -- the all-reduce of the step's activations grows with the tokens (the measured algorithm);
* **per-request speculative work** -- the engine's fixed cost per request of a speculative step (``spec_request_us``)
  grows with the batch;
* **draft** / **acceptance** -- the draft's cost or the AL changed with D.

Where D moved between the rows, the attribution compares one configuration at both batches (``_same_config``): D is
the optimizer's answer to the costs, so the cost that moved is what gets named.

A jump whose largest share comes from the fixed per-step costs (the engine's ``step_us``, the GPU file's per-layer
overheads) has no physical reason -- those do not change with B -- and is reported ``unexplained``;
``tests/test_recipes_physics.py`` treats it as a bug.
"""
from __future__ import annotations

import math
import dataclasses
from dataclasses import dataclass, field

JUMP = 0.10
_NAMES = {"moe": "MoE expert loading", "linear": "GEMMs leave the memory-bound regime (more rows B*(1+D) per weight)",
          "lm_head": "LM-head GEMM grows with the rows", "attention": "attention KV reads grow",
          "state": "linear-attention / Mamba state traffic grows", "comm": "tensor parallel: the all-reduce grows",
          "draft": "the draft's cost", "acceptance": "acceptance of the chosen D",
          "spec_fixed": "the speculative step's per-request work grows with the batch (the engine's spec_request_us)"}
_TABLE = {"moe": "moe", "linear": "gemm", "lm_head": "gemm", "attention": "attn", "comm": "ar"}
_FIXED = ("overhead", "engine")  # constant per step: they cannot move a speedup between batch sizes


@dataclass(frozen=True)
class RowState:
    """One plan row as the next one is compared with it: the batch, printed speedup, best D >= 1 speedup (None if
    no drafting configuration fits), chosen and plain points, memory status and drafter, speculative fixed cost."""

    batch: int
    speedup: float
    spec_speedup: float | None
    point: object
    base: object
    fits: bool
    capped: bool
    drafter: str
    spec_fixed: float = 0.0
    points: dict = field(default_factory=dict, compare=False)  # (drafter, D, nodes, topk) -> Point at this batch


def config_key(p) -> tuple:
    return (p.drafter, p.draft_len, p.num_nodes, p.topk)


def _changed(a: float, b: float) -> float:
    return abs(b / a - 1.0) if a > 0 else 0.0


def _parts(state: RowState) -> tuple[dict, dict]:
    """(plain step by class, speculative step by class) in seconds."""
    base = state.base.verify.as_dict()
    spec = dict(state.point.verify.as_dict()) if state.point.draft_len else dict(base)
    if state.point.draft_len:
        spec["draft"] = state.point.draft.total
        spec["spec_fixed"] = state.spec_fixed
    return base, spec


def _same_config(prev: RowState, cur: RowState) -> tuple[RowState, RowState]:
    """The pair of states to attribute a jump on: where D moved, one configuration at both batches (the previous
    row's or the current row's, whichever moved more in the jump's direction), so that the cost that moved D is
    named rather than D itself."""
    if config_key(prev.point) == config_key(cur.point) or not prev.point.draft_len or not cur.point.draft_len:
        return prev, cur
    sign = 1.0 if cur.speedup > prev.speedup else -1.0
    pairs = []
    for key in (config_key(prev.point), config_key(cur.point)):
        a, b = prev.points.get(key), cur.points.get(key)
        if a is not None and b is not None:
            pa, pb = dataclasses.replace(prev, point=a), dataclasses.replace(cur, point=b)
            change = math.log((b.tokens_per_s / cur.base.tokens_per_s) / (a.tokens_per_s / prev.base.tokens_per_s))
            pairs.append((sign * change, pa, pb))
    if not pairs:
        return prev, cur
    _, pa, pb = max(pairs, key=lambda t: t[0])
    return pa, pb


def _attribution(prev: RowState, cur: RowState) -> dict:
    """Contribution of each class (and acceptance) to log(speedup_cur / speedup_prev)."""
    (b0, s0), (b1, s1) = _parts(prev), _parts(cur)
    tb0, tb1, ts0, ts1 = sum(b0.values()), sum(b1.values()), sum(s0.values()), sum(s1.values())
    mid_b, mid_s = (tb0 + tb1) / 2, (ts0 + ts1) / 2
    out = {k: (b1.get(k, 0.0) - b0.get(k, 0.0)) / mid_b - (s1.get(k, 0.0) - s0.get(k, 0.0)) / mid_s
           for k in set(b0) | set(b1) | set(s0) | set(s1)}
    out["acceptance"] = math.log(cur.point.expected_al / prev.point.expected_al)
    return out


def _switch(pricer, kind: str, lo: int, hi: int):
    db = getattr(pricer, "db", None) if pricer is not None else None
    if db is None or kind not in _TABLE:
        return None
    found = [s for s in db.switch_between(min(lo, hi), max(lo, hi)) if s[0] == _TABLE[kind]]
    return max(found, key=lambda s: s[3]) if found else None


def jump_rule(pricer, prev: RowState | None, cur: RowState) -> str | None:
    """The rule that explains a jump of more than ``JUMP`` from ``prev`` to ``cur``; None when there is no jump; a
    text containing ``unexplained`` when no rule does (see the module docstring)."""
    if prev is None or _changed(prev.speedup, cur.speedup) <= JUMP:
        return None
    head = f"jump {prev.speedup:.2f}x -> {cur.speedup:.2f}x from batch {prev.batch}: "
    if prev.fits != cur.fits or prev.capped != cur.capped:
        return head + "memory (the configurations that fit changed)"
    if prev.drafter != cur.drafter and "none" not in (prev.drafter, cur.drafter):
        return head + f"drafter switch ({prev.drafter} -> {cur.drafter})"
    if "none" in (prev.drafter, cur.drafter):
        if prev.spec_speedup and cur.spec_speedup and _changed(prev.spec_speedup, cur.spec_speedup) <= JUMP:
            return head + (f"speculation off (the best D >= 1 moves {prev.spec_speedup:.2f}x -> "
                           f"{cur.spec_speedup:.2f}x)")
    a, b = _same_config(prev, cur)
    parts = _attribution(a, b)
    sign = 1.0 if cur.speedup > prev.speedup else -1.0
    kind = max(parts, key=lambda k: sign * parts[k])
    share = f"{parts[kind] * 100:+.0f}% of the {math.log(cur.speedup / prev.speedup) * 100:+.0f}% (log)"
    if kind in _FIXED:
        return head + f"unexplained (fixed per-step costs move it: {kind} {share})"
    rows = (a.batch * a.point.num_nodes, b.batch * b.point.num_nodes)
    hit = _switch(pricer, kind, prev.batch, cur.batch) or _switch(pricer, kind, *rows)
    if hit is not None:
        _, a, b, r = hit
        return head + (f"kernel switch: the measured {kind} price grows x{r:.1f} from {a} to {b} rows "
                       f"({pricer.label}; another kernel or tile at that size), {share}")
    where = (f"plain step {prev.batch} -> {cur.batch} tokens, verification {rows[0]} -> {rows[1]} tokens"
             if kind not in ("draft", "acceptance") else f"D {a.point.draft_len} -> {b.point.draft_len}")
    return head + f"{_NAMES.get(kind, kind)} ({where}), {share}"
