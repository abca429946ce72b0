"""Predicted versus swept draft length.

For every batch size B and draft length D in the grid, the local runtime serves the same prompts
with continuous batching on B rows (more prompts than B: a finished request's row goes to the next
prompt, its prefill untimed), one engine per D, the engines stepped in turn (``trtspec.bench.steps``),
and the **steady-state** decode throughput is measured: tokens over seconds of the steps in which
all B rows were running, requests at every stage of their lives -- what a server at concurrency B
sees, and the quantity the planner predicts, ``B * E[AL](D) / step(B, D)``. The acceptance
(censoring-aware per-position counts at the largest D, :func:`sweep_acceptance`) and a cost table
(``trtspec profile``, engine method, at the context the steady steps attended to, measured per B:
:func:`measured_contexts`) then give, per B:

* ``planner``: the D that the recipe planner (``trtspec.recipes``: ``build_request`` + ``plan``,
  as ``resolve_recipe('auto')`` runs it) chooses with that acceptance and calibration for exactly
  the swept batch sizes and D range (when the recipe layer is installed);
* ``model_d``: the D maximising this module's closed-form estimate
  ``B * E[AL](D) / (T_target(B, D+1) + D * T_draft(B, 1))`` on the same inputs (a cross-check);
* ``best_d``: the measured best; ``fixed3``: D = 3; ``auto``: TensorRT-LLM's AUTO heuristic
  (D = 5 for B <= 4, else 3; speculation off above 32);

and the ratio of each choice's measured throughput to the best one's (goals: planner >= 0.97, and
not more than 0.02 below fixed3).
:func:`format_detail` prints predicted next to measured step time, E[AL] and tokens/s per (B, D).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from trtspec.bench import metrics as M
from trtspec.bench.datasets import Prompt
from trtspec.bench.runners import LocalRunner
from trtspec.bench.steps import PositionCounts, Tally, paired_pass, with_draft_len

#: goals of the comparison: the planner's D >= TARGET_RATIO of the best swept D, and not more than
#: FIXED3_MARGIN below a fixed D = 3
TARGET_RATIO = 0.97
FIXED3_MARGIN = 0.02


def auto_heuristic(batch: int) -> int:
    """TensorRT-LLM's AUTO draft length: 5 up to batch 4, 3 up to 32, 0 (off) above."""
    return 5 if batch <= 4 else 3 if batch <= 32 else 0


@dataclass(frozen=True)
class SweepConfig:
    """``draft_lens`` D values (default 0..8; 0 = plain decoding); ``batch_sizes`` (default 1, 4, 16);
    ``rounds`` passes over the prompts per measurement (default 1); ``repeats`` interleaved passes over
    the grid, median kept (default 3); ``max_new_tokens`` per request (default 32); ``clock``
    'wall' (default) or 'cpu' (process CPU time, single-threaded: for busy shared CPU machines)
    for both the sweep and the cost table; ``acceptance``: the planner's a_k from the counts at the
    largest D ('max_d', default) or pooled over every swept D >= 1 ('pooled'); ``prior_steps``
    (default 0: none): pseudo-steps that shrink each a_k toward the pooled rate (see
    ``metrics.summarize_positions``); ``requests_per_slot`` (default 3) and ``min_requests``
    (default 12): batch size B serves the first ``max(min_requests, requests_per_slot * B + 1)`` of
    the prompts (at most all of them), enough to refill its rows while small batches, the dearest per
    token, serve fewer."""

    draft_lens: tuple[int, ...] = tuple(range(0, 9))
    batch_sizes: tuple[int, ...] = (1, 4, 16)
    rounds: int = 1
    repeats: int = 3
    max_new_tokens: int = 32
    clock: str = "wall"
    acceptance: str = "max_d"
    prior_steps: float = 0.0
    requests_per_slot: int = 3
    min_requests: int = 12

    def __post_init__(self) -> None:
        if not self.draft_lens or any(d < 0 for d in self.draft_lens):
            raise ValueError(f"draft_lens={self.draft_lens}: expected non-negative integers")
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes={self.batch_sizes}: expected positive integers")
        if self.rounds < 1 or self.repeats < 1 or self.max_new_tokens < 1:
            raise ValueError(f"rounds={self.rounds}, repeats={self.repeats}, max_new_tokens={self.max_new_tokens}: "
                             "expected >= 1")
        if self.clock not in ("wall", "cpu"):
            raise ValueError(f"clock={self.clock!r}: expected 'wall' or 'cpu'")
        if self.acceptance not in ("max_d", "pooled"):
            raise ValueError(f"acceptance={self.acceptance!r}: expected 'max_d' or 'pooled'")
        if self.prior_steps < 0:
            raise ValueError(f"prior_steps={self.prior_steps}: expected >= 0")
        if self.requests_per_slot < 1 or self.min_requests < 1:
            raise ValueError(f"requests_per_slot={self.requests_per_slot}, min_requests={self.min_requests}: "
                             "expected >= 1")
        object.__setattr__(self, "draft_lens", tuple(sorted(set(self.draft_lens))))
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))


@dataclass
class Point:
    """One measured (B, D) in steady state (see ``trtspec.bench.steps``): ``output_tokens`` and
    ``wall_s`` summed over repeats, median ``tokens_per_s`` and ``step_s`` (seconds per engine step),
    ``mean_al`` over the steady request-steps (budget-capped last steps included), ``steady_steps``
    engine steps in all, ``all_tokens_per_s``: median over every timed step (the drain included),
    ``full_al``: AL over every request-step with the full D, ``cb_tokens_per_s`` = B * full_al /
    step_s (a cross-check: the rate without the budget caps), and ``context``: mean tokens of the
    longest request in the steady steps (what their attention read)."""

    batch: int
    draft_len: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    mean_al: float
    step_s: float = 0.0
    steady_steps: int = 0
    all_tokens_per_s: float = 0.0
    full_al: float = 0.0
    cb_tokens_per_s: float = 0.0
    context: float = 0.0


@dataclass
class BatchVerdict:
    batch: int
    best_d: int
    best_tokens_per_s: float
    choices: dict[str, int | None]          # name -> D (planner, model, fixed3, auto)
    ratios: dict[str, float | None]         # name -> measured tok/s of that D / best
    predicted_tokens_per_s: dict[int, float] = field(default_factory=dict)  # model estimate per D
    predicted_step_s: dict[int, float] = field(default_factory=dict)        # model step time per D
    predicted_al: dict[int, float] = field(default_factory=dict)            # E[AL](D) from the rates
    cb_ratios: dict[str, float | None] = field(default_factory=dict)       # the same on cb_tokens_per_s


def encode_prompts(runner: LocalRunner, prompts: Sequence[Prompt], max_new_tokens: int) -> list[list[int]]:
    """First turns of ``prompts`` as token ids, left-truncated to leave ``max_new_tokens`` of context."""
    from trtspec.bench.datasets import render_turn

    tok = runner.pipeline.tokenizer
    return [runner._fit(tok.encode(render_turn(p, 0, (), runner.chat)), max_new_tokens) for p in prompts]


def measure_grid(runner: LocalRunner, prompts: Sequence[Prompt], cfg: SweepConfig, *,
                 progress: Callable[[], None] | None = None) -> tuple[list[Point], dict[int, PositionCounts],
                                                                       dict[int, dict[str, PositionCounts]]]:
    """Measure every (B, D) on the same workload: all ``prompts`` (``cfg.rounds`` passes) served with
    continuous batching on B rows, one engine per D, the engines stepped in turn (``steps.paired_pass``;
    they share ``runner``'s models). After an untimed warm-up per B, the grid is measured
    ``cfg.repeats`` times; each point keeps its median steady-state tokens/s and step time. Batch
    size B serves the first ``max(cfg.min_requests, cfg.requests_per_slot * B + 1)`` prompts. Returns
    the points and, per D, the censoring-aware acceptance counts of the first pass at the largest B
    (it serves the most prompts; greedy outputs do not depend on B), overall and per category."""
    import statistics

    if not prompts:
        raise ValueError("prompts: need at least one prompt")
    work = list(prompts) * cfg.rounds
    if len(work) <= max(cfg.batch_sizes):
        raise ValueError(f"prompts: {len(work)} prompts x rounds cannot refill batch size {max(cfg.batch_sizes)}; "
                         "continuous batching needs more prompts than the largest batch")
    ids = encode_prompts(runner, work, cfg.max_new_tokens)
    cats = [p.category for p in work]
    pipes = {d: with_draft_len(runner.pipeline, d) for d in cfg.draft_lens}
    for b in cfg.batch_sizes:  # warm-up, untimed: first calls at these shapes
        paired_pass(pipes, ids[:b + 1], cats[:b + 1], b, min(cfg.max_new_tokens, 8), runner.now)
    runs: dict[tuple[int, int], list[Tally]] = {}
    for _ in range(cfg.repeats):
        for b in cfg.batch_sizes:
            n = min(len(ids), max(cfg.min_requests, cfg.requests_per_slot * b + 1))
            for d, t in paired_pass(pipes, ids[:n], cats[:n], b, cfg.max_new_tokens, runner.now).items():
                runs.setdefault((b, d), []).append(t)
                if progress is not None:
                    progress()
    points = []
    for (b, d), ts in sorted(runs.items()):
        steady = [t for t in ts if t.steady_steps]
        use = steady or ts
        tps = statistics.median(t.steady_tokens_per_s if steady else t.all_tokens_per_s for t in use)
        step = statistics.median(t.steady_step_s for t in steady) if steady else 0.0
        req_steps = sum(t.steady_request_steps for t in ts)
        al = 1.0 + sum(t.steady_accepted for t in ts) / req_steps if req_steps else 1.0
        full_steps = sum(t.full_request_steps for t in ts)
        full_al = 1.0 + sum(t.full_accepted for t in ts) / full_steps if full_steps else 1.0
        n_steady = sum(t.steady_steps for t in ts)
        points.append(Point(b, d, sum(t.steady_tokens for t in ts), sum(t.steady_s for t in ts), tps, al, step,
                            n_steady, statistics.median(t.all_tokens_per_s for t in ts),
                            full_al, b * full_al / step if step else 0.0,
                            sum(t.steady_context for t in ts) / n_steady if n_steady else 0.0))
    b0 = max(cfg.batch_sizes)
    counts = {d: runs[b0, d][0].positions for d in cfg.draft_lens}
    by_cat = {d: runs[b0, d][0].by_category for d in cfg.draft_lens}
    return points, counts, by_cat


def model_step(cost: Any, batch: int, d: int) -> float:
    """The planner's step time with a calibration table: ``target_time(B, D+1) + D * draft_step_time(B, 1)``."""
    return cost.target_time(batch, d + 1) + (d * cost.draft_step_time(batch, 1) if d else 0.0)


def model_al(rates: Sequence[float], d: int) -> float:
    """E[AL](D) from a_1..a_n (positions past n reuse a_n, as the planner does)."""
    return M.expected_al([rates[min(k, len(rates) - 1)] for k in range(d)]) if d else 1.0


def model_throughput(rates: Sequence[float], cost: Any, batch: int, d: int) -> float:
    """Closed-form estimate (tokens/s) from a_k and a cost table with ``target_time(B, T)`` and
    ``draft_step_time(B, W)`` (``trtspec.recipes.calibration.CostTable``): ``B * E[AL](D) / step``."""
    return batch * model_al(rates, d) / model_step(cost, batch, d)


def planner_choices(target_dir: str | Path, acceptance_path: str | Path, calibration_path: str | Path,
                    batch_sizes: Sequence[int], *, drafter: str = "draft_model", gpu: str = "h200",
                    max_draft_len: int = 8, draft: str | Path | None = None) -> dict[int, dict[str, float]] | None:
    """The planner's row per batch size (``draft_len``, predicted ``tokens_per_s``, ``speedup``):
    ``trtspec.recipes`` planning for exactly these batch sizes and D <= ``max_draft_len`` (the swept
    range) with the measured acceptance and calibration; None when the recipe layer is absent."""
    try:
        from trtspec.recipes.api import build_request
        from trtspec.recipes.optimizer import plan
    except ImportError:
        return None
    req = build_request(model=str(target_dir), gpu=gpu, drafters=drafter, acceptance=str(acceptance_path),
                        batches=tuple(batch_sizes), max_draft_len=max_draft_len, calibration=str(calibration_path),
                        max_batch_size=max(batch_sizes), draft_model=None if draft is None else str(draft))
    out = {}
    for row in plan(req).rows:
        r = row.to_dict() if hasattr(row, "to_dict") else dict(row)
        out[int(r["batch"])] = {"draft_len": int(r["draft_len"]), "tokens_per_s": float(r["tokens_per_s"]),
                                "speedup": float(r["speedup"])}
    return out


def _get(row: Any, key: str) -> Any:
    return row[key] if isinstance(row, dict) else getattr(row, key)


def compare(points: Sequence[Point], rates: Sequence[float], cost: Any, planner: dict[int, dict] | None
            ) -> list[BatchVerdict]:
    """Per batch size: best measured D, each choice's throughput ratio to it, and the model's
    predicted step time, E[AL] and tokens/s per D (for the side-by-side table)."""
    out = []
    for b in sorted({p.batch for p in points}):
        by_d = {p.draft_len: p.tokens_per_s for p in points if p.batch == b}
        best_d = max(by_d, key=by_d.get)
        est = {d: model_throughput(rates, cost, b, d) for d in by_d}
        choices: dict[str, int | None] = {
            "planner": None if planner is None or b not in planner else int(planner[b]["draft_len"]),
            "model": max(est, key=est.get),
            "fixed3": 3,
            "auto": auto_heuristic(b),
        }
        ratios = {k: (by_d[d] / by_d[best_d] if d in by_d else None) if d is not None else None
                  for k, d in choices.items()}
        cb = {p.draft_len: p.cb_tokens_per_s for p in points if p.batch == b}
        top = max(cb.values())
        cb_ratios = {k: (cb[d] / top if d in cb and top > 0 else None) if d is not None else None
                     for k, d in choices.items()}
        out.append(BatchVerdict(b, best_d, by_d[best_d], choices, ratios, est,
                                {d: model_step(cost, b, d) for d in by_d}, {d: model_al(rates, d) for d in by_d},
                                cb_ratios))
    return out


def format_detail(verdicts: Sequence[BatchVerdict], points: Sequence[Point]) -> str:
    """Predicted versus measured per (B, D): step time (ms), E[AL] (steady steps, predicted, full-D
    request-steps), tokens/s and their ratios, and the uncapped composition ``cb tok/s``."""
    meas = {(p.batch, p.draft_len): p for p in points}
    head = (f"{'B':>4} {'D':>2} | {'step ms':>7} {'pred':>7} {'p/m':>5} | {'AL':>5} {'pred':>5} {'whole':>5} | "
            f"{'tok/s':>8} {'pred':>8} {'p/m':>5} | {'cb tok/s':>8}")
    lines = [head, "-" * len(head)]
    for v in verdicts:
        for d in sorted(v.predicted_tokens_per_s):
            p = meas[v.batch, d]
            ps, pa, pt = v.predicted_step_s[d], v.predicted_al[d], v.predicted_tokens_per_s[d]
            ms = p.step_s * 1e3
            lines.append(f"{v.batch:>4} {d:>2} | {ms:7.2f} {ps * 1e3:7.2f} {ps * 1e3 / ms if ms else 0:5.2f} | "
                         f"{p.mean_al:5.2f} {pa:5.2f} {p.full_al:5.2f} | {p.tokens_per_s:8.1f} {pt:8.1f} "
                         f"{pt / p.tokens_per_s:5.2f} | {p.cb_tokens_per_s:8.1f}")
    return "\n".join(lines)


def format_table(verdicts: Sequence[BatchVerdict]) -> str:
    """A plain-text table of the verdicts."""
    head = f"{'B':>4} {'best D':>6} {'tok/s':>9} | " + " | ".join(f"{k:>7} D  ratio" for k in
                                                                     ("planner", "model", "fixed3", "auto"))
    lines = [head, "-" * len(head)]
    for v in verdicts:
        cells = []
        for k in ("planner", "model", "fixed3", "auto"):
            d, r = v.choices[k], v.ratios[k]
            cells.append(f"{'-' if d is None else d:>9} {'  n/a' if r is None else f'{r:5.3f}'}")
        lines.append(f"{v.batch:>4} {v.best_d:>6} {v.best_tokens_per_s:>9.1f} | " + " | ".join(cells))
    return "\n".join(lines)


def measured_contexts(points: Sequence[Point], context: int, reserve: int) -> tuple[tuple[int, int], ...]:
    """(B, tokens) per batch size: the mean over D of the points' steady-step context (the longest
    request of each batch, what its attention read), at most ``context - reserve``."""
    out = []
    for b in sorted({p.batch for p in points}):
        ctxs = [p.context for p in points if p.batch == b and p.context > 0]
        if ctxs:
            out.append((b, max(1, min(round(sum(ctxs) / len(ctxs)), context - reserve))))
    return tuple(out)


def sweep_acceptance(counts: dict[int, PositionCounts], by_cat: dict[int, dict[str, PositionCounts]],
                     cfg: SweepConfig, *, drafter: str, source: str) -> M.AcceptanceProfile:
    """The acceptance profile given to the planner: censoring-aware per-position counts (see
    ``trtspec.bench.steps``) at the largest D (``cfg.acceptance='max_d'``) or pooled over every D >= 1
    (``'pooled'``), each a_k shrunk by ``cfg.prior_steps`` pseudo-steps toward the pooled rate
    (``metrics.summarize_positions``); the counts go into the profile."""
    dmax = max(cfg.draft_lens)
    use = [dmax] if cfg.acceptance == "max_d" else [d for d in cfg.draft_lens if d >= 1]
    total, cats = PositionCounts(), {}
    for d in use:
        total = total.merge(counts[d])
        for c, pc in by_cat[d].items():
            cats[c] = cats.get(c, PositionCounts()).merge(pc)

    def summ(pc: PositionCounts) -> M.AcceptanceSummary:
        return M.summarize_positions(pc.reached[:dmax], pc.accepted[:dmax], draft_len=dmax,
                                     prior_steps=cfg.prior_steps)

    where = f"D={dmax}" if cfg.acceptance == "max_d" else "pooled over D=" + ",".join(map(str, use))
    how = (f"censoring-aware per-position counts ({where}), "
           f"a_k shrunk by {cfg.prior_steps:g} pseudo-steps toward the pooled rate")
    return M.AcceptanceProfile(drafter, dmax, summ(total), {c: summ(pc) for c, pc in cats.items()},
                               f"{source}; {how}", extra={"counts": total.to_dict(), "estimator": how})


def run_sweep(target: str | Path, draft: str | Path | None, prompts: Sequence[Prompt], cfg: SweepConfig, *,
              out_dir: str | Path, drafter: str = "draft_model", device: str = "cpu", dtype: str = "float32",
              calibration: str | Path | None = None, gpu: str = "h200",
              profile_cfg: Any = None, progress: Callable[[], None] | None = None) -> dict[str, Any]:
    """Measure the grid, write ``acceptance.json`` (:func:`sweep_acceptance`) and, unless
    ``calibration`` is given, ``cost_table.json`` (``trtspec profile`` on the same grid, engine
    method, median of 15 interleaved steps per point, at the context the sweep's steady steps read
    per batch size: :func:`measured_contexts`), then compare.
    Returns (and writes to ``sweep.json``) points, verdicts, the tables' text and the counts per D."""
    from trtspec.bench.profile import ProfileConfig, profile_pair, use_clock
    from trtspec.bench.runners import resolve_pair
    from trtspec.recipes.calibration import load_cost_table

    use_clock(cfg.clock, device)
    dmax = max(cfg.draft_lens)
    if dmax < 1:
        raise ValueError("draft_lens: the sweep needs some D >= 1 to measure acceptance")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target_dir, bundle_draft, _ = resolve_pair(target)
    draft = draft if draft is not None else bundle_draft
    t0 = time.perf_counter()
    runner = LocalRunner.load(target_dir, draft, drafter=drafter, draft_len=dmax, device=device, dtype=dtype,
                              clock=cfg.clock)
    points, counts, by_cat = measure_grid(runner, prompts, cfg, progress=progress)
    t1 = time.perf_counter()
    prof = sweep_acceptance(counts, by_cat, cfg, drafter=drafter,
                            source=f"trtspec bench --sweep: target={target_dir}, draft={draft}, "
                                   f"{len(prompts) * cfg.rounds} requests x {cfg.max_new_tokens} tokens, greedy, "
                                   f"{device}")
    acc_path = prof.save(out / "acceptance.json")
    if calibration is None:
        ctx = int(runner.pipeline.target.config.max_position_embeddings)
        pc = profile_cfg or ProfileConfig(
            batch_sizes=cfg.batch_sizes, tokens=tuple(d + 1 for d in cfg.draft_lens), draft_tokens=(1,),
            device=device, dtype=dtype, clock=cfg.clock, repeats=15,
            batch_contexts=measured_contexts(points, ctx, 3 * (dmax + 2) + 1))
        calibration = profile_pair(target_dir, draft, pc, drafter=drafter).save(out / "cost_table.json")
    t2 = time.perf_counter()
    cost = load_cost_table(calibration)
    planner = planner_choices(target_dir, acc_path, calibration, cfg.batch_sizes, drafter=drafter, gpu=gpu,
                              max_draft_len=dmax, draft=draft)
    verdicts = compare(points, prof.overall.rates, cost, planner)
    result = {
        "config": asdict(cfg), "device": cost.device, "target": str(target_dir), "draft": str(draft),
        "acceptance": str(acc_path), "calibration": str(calibration), "mean_al_at_max_d": prof.overall.mean_al,
        "rates": list(prof.overall.rates), "planner_available": planner is not None,
        "planner_rows": {str(k): v for k, v in (planner or {}).items()},
        "points": [asdict(p) for p in points], "verdicts": [asdict(v) for v in verdicts],
        "counts": {str(d): c.to_dict() for d, c in counts.items()},
        "table": format_table(verdicts), "detail": format_detail(verdicts, points),
        "wall_s": time.perf_counter() - t0, "sweep_s": t1 - t0, "profile_s": t2 - t1, "goal_ratio": TARGET_RATIO,
    }
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / "sweep.json")
    return result
