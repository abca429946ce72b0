"""Predicted versus swept draft length.

For every batch size B and draft length D in the grid, the local runtime decodes the same
prompts B at a time and the decode throughput is measured (tokens emitted after each batch's
first step, which holds the prefill, over the time of the later steps; see :func:`decode_run`).
The acceptance measured at the largest D (greedy acceptance does not depend on B) and a cost
table (``trtspec profile``) then give, per B:

* ``planner``: the D that the recipe planner (``trtspec.recipes``: ``build_request`` + ``plan``,
  as ``resolve_recipe('auto')`` runs it) chooses with that acceptance and calibration for exactly
  the swept batch sizes and D range (when the recipe layer is installed);
* ``model_d``: the D maximising this module's closed-form estimate
  ``B * E[AL](D) / (T_target(B, D+1) + D * T_draft(B, 1))`` on the same inputs (a cross-check);
* ``best_d``: the measured best; ``fixed3``: D = 3; ``auto``: TensorRT-LLM's AUTO heuristic
  (D = 5 for B <= 4, else 3; speculation off above 32);

and the ratio of each choice's measured throughput to the best one's (goal: planner >= 0.95).
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

TARGET_RATIO = 0.95


def auto_heuristic(batch: int) -> int:
    """TensorRT-LLM's AUTO draft length: 5 up to batch 4, 3 up to 32, 0 (off) above."""
    return 5 if batch <= 4 else 3 if batch <= 32 else 0


@dataclass(frozen=True)
class SweepConfig:
    """``draft_lens`` D values (default 0..8; 0 = plain decoding); ``batch_sizes`` (default 1, 4, 16);
    ``rounds`` passes over the prompts per measurement (default 1); ``repeats`` interleaved passes over
    the grid, median kept (default 3); ``max_new_tokens`` per request (default 32); ``clock``
    'wall' (default) or 'cpu' (process CPU time, single-threaded: for busy shared CPU machines)
    for both the sweep and the cost table."""

    draft_lens: tuple[int, ...] = tuple(range(0, 9))
    batch_sizes: tuple[int, ...] = (1, 4, 16)
    rounds: int = 1
    repeats: int = 3
    max_new_tokens: int = 32
    clock: str = "wall"

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
        object.__setattr__(self, "draft_lens", tuple(sorted(set(self.draft_lens))))
        object.__setattr__(self, "batch_sizes", tuple(sorted(set(self.batch_sizes))))


@dataclass
class Point:
    """One measured (B, D): decode tokens and seconds summed over repeats, median tokens/s, mean AL."""

    batch: int
    draft_len: int
    output_tokens: int
    wall_s: float
    tokens_per_s: float
    mean_al: float


@dataclass
class BatchVerdict:
    batch: int
    best_d: int
    best_tokens_per_s: float
    choices: dict[str, int | None]          # name -> D (planner, model, fixed3, auto)
    ratios: dict[str, float | None]         # name -> measured tok/s of that D / best
    predicted_tokens_per_s: dict[int, float] = field(default_factory=dict)  # model estimate per D


def decode_run(runner: LocalRunner, prompts: Sequence[Prompt], batch: int, max_new_tokens: int
               ) -> tuple[int, float, list[M.RequestRecord]]:
    """Decode throughput of ``prompts`` (first turns) through ``runner``'s engine, ``batch`` at a time.

    Each batch of up to ``batch`` requests is admitted together; its first engine step (prefill of
    every prompt plus the first speculative step) is not timed, then every later step is, until
    the batch is done. Returns (tokens emitted in timed steps, seconds on the runner's clock,
    per-request records over all steps). This is the quantity the planner predicts
    (``B * AL / step time``), without the prefill that does not depend on D.
    """
    from trtspec.bench.datasets import render_turn
    from trtspec.bench.runners import record_from_stats

    pipe = runner.pipeline
    ids = [runner._fit(pipe.tokenizer.encode(render_turn(p, 0, (), runner.chat)), max_new_tokens) for p in prompts]
    ctx = int(pipe.target.config.max_position_embeddings)
    tokens, seconds, records = 0, 0.0, []
    for start in range(0, len(ids), batch):
        chunk = list(range(start, min(start + batch, len(ids))))
        longest = max(len(ids[i]) for i in chunk)
        eng = pipe.engine(max_batch_size=len(chunk), max_seq_len=min(ctx, longest + max_new_tokens + 1))
        for i in chunk:
            eng.add_request(i, ids[i], pipe.params(max_new_tokens=max_new_tokens))
        final: dict[int, Any] = {}
        emitted: dict[int, int] = {i: 0 for i in chunk}
        for o in eng.step():  # prefill + first step: untimed
            emitted[o.request_id] += len(o.new_token_ids)
            final[o.request_id] = o.stats
        t0 = runner.now()
        while eng.has_work():
            for o in eng.step():
                tokens += len(o.new_token_ids)
                emitted[o.request_id] += len(o.new_token_ids)
                final[o.request_id] = o.stats
        seconds += runner.now() - t0
        for i in chunk:
            records.append(record_from_stats(prompts[i].question_id, prompts[i].category, final[i], emitted[i], 0.0))
    return tokens, seconds, records


def measure_grid(load: Callable[[int], LocalRunner], prompts: Sequence[Prompt], cfg: SweepConfig, *,
                 progress: Callable[[], None] | None = None) -> tuple[list[Point], dict[int, list[M.RequestRecord]]]:
    """Measure every (B, D) on the same workload: all ``prompts`` (``cfg.rounds`` passes), B at a
    time (:func:`decode_run`). ``load(D)`` returns a LocalRunner with draft length D; all are loaded
    and warmed up first, then the grid is measured ``cfg.repeats`` times, interleaved (slow drift
    of a shared machine hits every D alike); each point keeps its median tokens/s. Returns the
    points and, per D, the request records of its first pass (for the acceptance profile)."""
    import statistics

    if not prompts:
        raise ValueError("prompts: need at least one prompt")
    work = list(prompts) * cfg.rounds
    runners = {}
    for d in cfg.draft_lens:
        runners[d] = load(d)
        decode_run(runners[d], work[:1], 1, 4)  # warm-up, untimed
    runs: dict[tuple[int, int], list[tuple[int, float, int, int]]] = {}
    records: dict[int, list[M.RequestRecord]] = {}
    for _ in range(cfg.repeats):
        for d in cfg.draft_lens:
            for b in cfg.batch_sizes:
                toks, secs, recs = decode_run(runners[d], work, b, cfg.max_new_tokens)
                steps = sum(r.num_drafts for r in recs)
                acc = sum(r.accepted_tokens for r in recs)
                runs.setdefault((b, d), []).append((toks, secs, steps, acc))
                records.setdefault(d, recs)
                if progress is not None:
                    progress()
    points = []
    for (b, d), rs in sorted(runs.items()):
        tps = statistics.median(t / w for t, w, _, _ in rs)
        toks, wall = sum(r[0] for r in rs), sum(r[1] for r in rs)
        steps, acc = sum(r[2] for r in rs), sum(r[3] for r in rs)
        points.append(Point(b, d, toks, wall, tps, 1 + acc / steps if steps else 1.0))
    return points, records


def model_throughput(rates: Sequence[float], cost: Any, batch: int, d: int) -> float:
    """Closed-form estimate (tokens/s) from a_k and a cost table with ``target_time(B, T)`` and
    ``draft_step_time(B, W)`` (``trtspec.recipes.calibration.CostTable``)."""
    al = M.expected_al([rates[min(k, len(rates) - 1)] for k in range(d)]) if d else 1.0
    step = cost.target_time(batch, d + 1) + (d * cost.draft_step_time(batch, 1) if d else 0.0)
    return batch * al / step


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
    """Per batch size: best measured D and each choice's throughput ratio to it."""
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
        out.append(BatchVerdict(b, best_d, by_d[best_d], choices, ratios, est))
    return out


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


def run_sweep(target: str | Path, draft: str | Path | None, prompts: Sequence[Prompt], cfg: SweepConfig, *,
              out_dir: str | Path, drafter: str = "draft_model", device: str = "cpu", dtype: str = "float32",
              calibration: str | Path | None = None, gpu: str = "h200",
              profile_cfg: Any = None, progress: Callable[[], None] | None = None) -> dict[str, Any]:
    """Measure the grid, write ``acceptance.json`` (measured at max D) and, unless ``calibration``
    is given, ``cost_table.json`` (``trtspec profile`` on the same grid, engine method, median of
    15 steps per point), then compare.
    Returns (and writes to ``sweep.json``) points, verdicts and the table text."""
    from trtspec.bench.profile import ProfileConfig, profile_pair, use_clock
    from trtspec.bench.runners import resolve_pair
    from trtspec.recipes.calibration import load_cost_table

    use_clock(cfg.clock, device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target_dir, bundle_draft, _ = resolve_pair(target)
    draft = draft if draft is not None else bundle_draft
    t0 = time.perf_counter()
    points, records = measure_grid(
        lambda d: LocalRunner.load(target_dir, draft, drafter=drafter, draft_len=d, device=device, dtype=dtype,
                                   clock=cfg.clock),
        prompts, cfg, progress=progress)
    dmax = max(cfg.draft_lens)
    if dmax < 1:
        raise ValueError("draft_lens: the sweep needs some D >= 1 to measure acceptance")
    prof = M.build_profile(records[dmax], drafter=drafter, draft_len=dmax,
                           source=f"trtspec bench --sweep: target={target_dir}, draft={draft}, D={dmax}, "
                                  f"{len(records[dmax])} requests, greedy, {device}")
    acc_path = prof.save(out / "acceptance.json")
    if calibration is None:
        pc = profile_cfg or ProfileConfig(batch_sizes=cfg.batch_sizes, tokens=tuple(d + 1 for d in cfg.draft_lens),
                                          draft_tokens=(1,), device=device, dtype=dtype, clock=cfg.clock,
                                          repeats=15)
        calibration = profile_pair(target_dir, draft, pc).save(out / "cost_table.json")
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
        "table": format_table(verdicts), "wall_s": time.perf_counter() - t0, "goal_ratio": TARGET_RATIO,
    }
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(out / "sweep.json")
    return result
