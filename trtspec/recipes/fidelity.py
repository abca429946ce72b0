"""Predictions against the published corpus (``trtspec.recipes.measurements``): how the planner is scored.

The corpus judges the *cost* model, so acceptance is never predicted here: it is taken as published, or made to
cancel. Each published figure is scored in one of these modes (``MODES``), counted separately:

* ``speedup`` -- a case that publishes D and its own AL (``al``, else ``acceptance_curve[D-1]``): the predicted
  speedup over no speculation at the same batch, ``AL * step(B, 0) / step(B, D)``, against the published one;
* ``speedup-source-al`` -- the same for a case whose AL the source states elsewhere for that configuration
  (``al_scope: source``, quoted in ``al_quote``; e.g. "every fixed arm sits flat near 3.4 regardless of load");
* ``batch-ratio`` -- two cases of one source with the same configuration and D at two batch sizes, in one split
  (``batch_pairs``): ``speedup(B) / speedup(B_ref)`` (B_ref the group's smallest batch). AL cancels under the
  stated assumption that acceptance does not depend on the batch (drafts and verification are per request; the
  DSpark post measures "every fixed arm ... flat ... regardless of load"), so these need no published AL, only D;
* ``baseline`` -- each distinct published no-speculation figure (``baseline_tokens_per_s`` / ``baseline_tpot_ms``
  at batch B): predicted ``B / step(B, 0)`` tok/s (per user: ``1 / step``) against it. Needs neither AL nor D: it
  judges the absolute price of a plain decode step (kernels plus the engine's ``step_us``).

Speedup modes count "wrong side of 1" and feed the best-D check of every published sweep over D (``sweep_best_d``);
ratios and baselines have no side of 1. A case that fits no mode is reported with the reason (``setup_case``).

The published configuration maps to a plan as follows:

* model: a built-in model whose ``source`` names the HF id, else aiconfigurator-core's ``model_configs/`` file of
  that id, else the same with a variant suffix removed (``-Instruct``, ``-Instruct-2507``, ``-FP8``, ``-NVFP4``,
  ``-MXFP8``, ``-MXFP4``, ``-Base``: same architecture, other weights; a dated revision ``-MMDD`` likewise), else
  the id's ``-Instruct`` config (a base model whose instruct config is the one shipped);
* GPUs: ``tp``, else ``num_gpus``, else the smallest of 1, 2, 4, 8 GPUs whose memory holds the weights
  (``UNSTATED_TP_FRACTION`` of it: the minimal deployment); ``ep`` (else 1; ignored when it does not divide
  ``tp``); quant ``nvfp4`` / ``mxfp4`` -> ``fp4``, ``mxfp8`` -> ``fp8``; ``native`` is priced as the case's
  ``priced_quant`` (the checkpoint's stated formats) and is not scored without one; ``int8_sq`` is not scored;
* drafter: ``eagle`` (EAGLE-1/2, one serial feature head) is priced as ``eagle3``; ``peagle`` (P-EAGLE: an
  EAGLE-3-style head drafting all D tokens in one pass) as a one-layer parallel drafter (``dflash`` with one
  layer); ``pard`` and ``medusa`` are not scored; ``draft_model`` needs the named draft's architecture;
* a tree verifies ``tree_nodes + 1`` tokens per request (the root counts) after ``draft_len`` draft steps of
  ``topk`` tokens each;
* context: ``isl + osl / 2`` (the mid-decode length) when both are stated, else ``DEFAULT_CONTEXT`` (1024 tokens:
  MT-bench-like chat turns);
* concurrency is taken as the batch (every client in flight), unless the case states how it was served
  (``includes_prefill``, ``max_num_seqs``, the engine's logged KV capacity: ``trtspec.recipes.serving``): then the
  running batch is capped by them and every request's prefill is priced inside the measured time;
* ``dp_attention``: attention data parallelism of that size over the case's GPUs (``PlanRequest.dp_attention``).

The engines' fixed costs are fitted on these figures (``trtspec.recipes.fidelity_fit``); how they transfer to a
source they were not fitted on is measured leave-one-source-out (``trtspec.recipes.validation``).
"""
from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from trtspec.recipes.errors import RecipeError

DEFAULT_CONTEXT = 1024
UNSTATED_TP_FRACTION = 0.95
VARIANT_SUFFIXES = ("-Instruct-2507", "-Instruct", "-FP8", "-NVFP4", "-MXFP8", "-MXFP4", "-Base")
QUANT_MAP = {"none": "none", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "int4_awq": "int4_awq",
             "w4a8_awq": "w4a8_awq"}
MODES = ("speedup", "speedup-source-al", "batch-ratio", "baseline")
SPEEDUP_MODES = MODES[:2]
# what must match for two cases of one source to form a batch-ratio pair (besides the batch)
PAIR_KEY = ("source", "split", "model", "gpu", "num_gpus", "tp", "ep", "quant", "priced_quant", "engine", "drafter",
            "draft_model", "draft_len", "tree_nodes", "topk", "dataset", "metric", "batch_kind")
# isl / osl need only agree within this fraction: a source that states each run's own mean lengths (one dataset
# sampled again at every concurrency) still compares one workload
PAIR_LENGTH_TOLERANCE = 0.1


@dataclass(frozen=True)
class CaseSetup:
    """A published case as a plan: the request (one batch), the drafter, D, verified tokens, width and AL;
    ``workload``: how the figure was served (``trtspec.recipes.serving.Workload``; None: decode steps at the
    published batch, nothing else in the time)."""

    case: object
    request: object
    drafter: object
    draft_len: int
    nodes: int
    topk: int
    al: float
    workload: object = None


@dataclass(frozen=True)
class Score:
    """One scored figure: ``published`` and ``predicted`` are speedups (speedup modes), speedup ratios
    (``batch-ratio``) or tok/s (``baseline``); ``id`` names the case (a pair: ``case / B=ref``)."""

    id: str
    split: str
    engine: str
    sweep: str | None
    draft_len: int
    published: float
    predicted: float
    mode: str = "speedup"

    @property
    def error(self) -> float:
        """predicted / published - 1."""
        return self.predicted / self.published - 1.0

    @property
    def wrong_side(self) -> bool:
        """A speedup predicted on the other side of 1 than published (always False for ratios and baselines)."""
        return self.mode in SPEEDUP_MODES and (self.predicted > 1.0) != (self.published > 1.0)


def _model_configs_dir() -> Path | None:
    try:
        import importlib.resources

        path = Path(str(importlib.resources.files("aiconfigurator_core") / "model_configs"))
    except (ModuleNotFoundError, TypeError):
        return None
    return path if path.is_dir() else None


@functools.lru_cache(maxsize=None)
def architecture_for(hf_id: str):
    """The ``Architecture`` of a published HF id (see the module docstring), or raise ``RecipeError``."""
    from trtspec.recipes.arch import builtin_names, load_architecture
    from trtspec.recipes.paths import models_dir

    import yaml

    candidates = [hf_id] + [hf_id[: -len(s)] for s in VARIANT_SUFFIXES if hf_id.endswith(s)]
    dated = re.match(r"^(.*)-\d{4}$", hf_id)  # a dated revision (DeepSeek-V4-Pro-0813): the same architecture
    candidates += [dated.group(1)] if dated else []
    candidates.append(f"{hf_id}-Instruct")  # a base model whose -Instruct config is the one shipped
    for cand in candidates:
        for name in builtin_names():
            doc = yaml.safe_load((models_dir() / f"{name}.yaml").read_text(encoding="utf-8")) or {}
            if f"huggingface.co/{cand}/".lower() in str(doc.get("source", "")).lower():
                return load_architecture(name)
    configs = _model_configs_dir()
    for cand in candidates:
        path = configs / f"{cand.replace('/', '--')}_config.json" if configs else None
        if path is not None and path.is_file():
            return load_architecture(str(path))
    raise RecipeError(f"model {hf_id!r}: no built-in model or aiconfigurator-core model config")


def _drafter(m, arch):
    from trtspec.recipes.drafters import DrafterSpec

    if m.drafter in ("eagle", "eagle3"):
        return DrafterSpec("eagle3")
    if m.drafter == "peagle":
        return DrafterSpec("dflash", dflash_layers=1)
    if m.drafter == "draft_model":
        if not m.draft_model:
            raise RecipeError("draft_model case without a named draft")
        return DrafterSpec("draft_model", draft_arch=architecture_for(m.draft_model))
    if m.drafter in ("dflash", "dspark"):
        return DrafterSpec(m.drafter, dflash_layers=m.draft_layers) if m.draft_layers else DrafterSpec(m.drafter)
    if m.drafter in ("mtp", "ngram", "sa"):
        if m.drafter == "mtp" and arch.mtp_layers == 0:
            return DrafterSpec("eagle3")  # an MTP head checkpoint outside the config: one target-width layer
        return DrafterSpec(m.drafter)
    raise RecipeError(f"drafter {m.drafter!r} is not priced by the planner")


def _minimal_tp(arch, gpu, quant: str) -> int:
    from trtspec.recipes.costmodel import Precision, weight_bytes

    prec = Precision.of(quant)
    for tp in (1, 2, 4, 8):
        if weight_bytes(arch, prec, tp) <= UNSTATED_TP_FRACTION * gpu.memory_bytes:
            return tp
    return 8


def _quant(m) -> str:
    if m.quant == "native":
        if m.priced_quant is None:
            raise RecipeError("quant 'native' without a priced_quant (the checkpoint's formats) is not one trtspec "
                              "prices")
        return m.priced_quant
    if m.quant not in QUANT_MAP:
        raise RecipeError(f"quant {m.quant!r} is not one trtspec prices")
    return QUANT_MAP[m.quant]


def published_al(m) -> float | None:
    """The case's AL: ``al``, else the published curve at its D, else None."""
    if m.al is not None:
        return m.al
    curve = m.acceptance_curve
    return curve[m.draft_len - 1] if m.draft_len and curve and len(curve) >= m.draft_len else None


def setup_case(m, *, pricing: str = "perf-db", need_al: bool = True) -> CaseSetup:
    """The plan of one published case; raises ``RecipeError`` saying why a case cannot be scored.
    ``need_al=False``: a case without a published AL gets AL = 1 and one without D gets D = 1 (for batch ratios,
    where AL cancels, and for the no-speculation baseline, which needs neither)."""
    from trtspec.recipes.acceptance import AcceptanceProfile
    from trtspec.recipes.gpus import load_gpu
    from trtspec.recipes.optimizer import PlanRequest

    if m.draft_len is None and need_al:
        raise RecipeError("no draft length published")
    draft_len = m.draft_len or 1
    al = published_al(m)
    if al is None and need_al:
        raise RecipeError("no acceptance length published")
    al = 1.0 if al is None else al
    quant = _quant(m)
    arch = architecture_for(m.model)
    spec = _drafter(m, arch)
    tp = m.tp or m.num_gpus or _minimal_tp(arch, load_gpu(m.gpu), quant)
    ep = m.ep if m.ep and tp % m.ep == 0 else 1
    context = m.isl + m.osl // 2 if m.isl and m.osl else DEFAULT_CONTEXT
    nodes = (m.tree_nodes + 1) if m.tree_nodes else draft_len + 1
    topk = (m.topk or 1) if m.tree_nodes else 1
    dummy = AcceptanceProfile(rates=(0.5,), source="fidelity: the published AL is used directly")
    req = PlanRequest(model=arch, gpu=load_gpu(m.gpu), drafters=(spec,), acceptance={spec.kind: dummy}, tp=tp, ep=ep,
                      quant=quant, batches=(m.batch,), context=context, max_draft_len=max(16, draft_len),
                      engine=m.engine, pricing=pricing, dp_attention=m.dp_attention or 1)
    return CaseSetup(m, req, spec, draft_len, nodes, topk, float(al), workload_of(m, req, spec))


def workload_of(m, request, drafter):
    """The case's ``trtspec.recipes.serving.Workload`` (None where it states nothing beyond the batch): the
    speculative server's KV capacity is its logged one, else derived from the baseline's
    (``serving.spec_capacity``)."""
    from trtspec.recipes.costmodel import Precision
    from trtspec.recipes.serving import Workload, spec_capacity

    spec_kv = m.spec_kv_cache_tokens
    if spec_kv is None and m.kv_cache_tokens:
        spec_kv = spec_capacity(m.kv_cache_tokens, request.model, drafter, Precision.of(request.quant), request.tp)
    w = Workload(concurrency=m.batch, isl=m.isl, osl=m.osl, includes_prefill=bool(m.includes_prefill),
                 per_user=m.metric != "output_tps_total", max_num_seqs=m.max_num_seqs, kv_tokens=m.kv_cache_tokens,
                 spec_kv_tokens=spec_kv)
    return w if w.active else None


def steps(setup: CaseSetup, pricer) -> tuple[float, float]:
    """(round at D = 0, round of the published configuration), seconds: the decode steps at the published batch,
    or, with a ``workload``, the rounds of ``trtspec.recipes.serving.round_times`` (running batch under the
    engine's caps, prefill in the measured time) -- either way ``batch * AL / round`` is the aggregate tok/s,
    ``1 / round(0)`` the per-user baseline and ``AL * round(0) / round(D)`` the speedup."""
    from trtspec.recipes.optimizer import _Evaluator
    from trtspec.recipes.serving import round_times, step_prefill

    w, batch = setup.workload, setup.case.batch
    running = (w.running(0), w.running(setup.draft_len)) if w is not None else (batch, batch)
    ev0 = _Evaluator(setup.request, running[0], pricer)
    evd = ev0 if running[1] == running[0] else _Evaluator(setup.request, running[1], pricer)
    base = ev0.point(setup.drafter, 0, 1.0, 1)
    spec = evd.point(setup.drafter, setup.draft_len, setup.al, setup.nodes, setup.topk)
    if w is None:
        return base.step, spec.step
    prefill = (step_prefill(w, setup.request, None, running[0], 1, 1.0, pricer),
               step_prefill(w, setup.request, setup.drafter, running[1], setup.nodes, setup.al, pricer))
    return round_times(w, batch, (base.step, spec.step), prefill, running)


def case_pricer(setup: CaseSetup, engine=None):
    """The case's ``Pricer``; ``engine``: an ``EngineProfile`` replacing the case engine's file."""
    from trtspec.recipes.optimizer import request_pricer
    from trtspec.recipes.pricing import Pricer

    base = request_pricer(setup.request)
    if base is None or engine is None:
        return base
    return Pricer(base.gpu, engine, base.db, base.note)


def predict(setup: CaseSetup, engine=None) -> float:
    """Predicted speedup of the case; ``engine``: an ``EngineProfile`` replacing the case engine's file."""
    s0, sd = steps(setup, case_pricer(setup, engine))
    return setup.al * s0 / sd


def speedup_mode(m) -> str:
    """``speedup`` or ``speedup-source-al`` (see the module docstring)."""
    return "speedup-source-al" if m.al_scope == "source" else "speedup"


def score_cases(measurements, *, pricing: str = "perf-db", engines: dict | None = None) -> tuple[list, dict]:
    """Speedup-mode scores of every case that publishes D and AL, and ``{case id: reason}`` for the others;
    ``engines``: name -> profile."""
    scores, skipped = [], {}
    for m in measurements:
        try:
            setup = setup_case(m, pricing=pricing)
            pred = predict(setup, (engines or {}).get(m.engine))
        except RecipeError as exc:
            skipped[m.id] = str(exc)
            continue
        scores.append(Score(m.id, m.split, m.engine, m.sweep, m.draft_len, float(m.speedup), pred, speedup_mode(m)))
    return scores, skipped


def _same_length(a: int | None, b: int | None) -> bool:
    return a == b or (a is not None and b is not None and abs(a - b) <= PAIR_LENGTH_TOLERANCE * max(a, b))


def batch_pairs(measurements) -> list:
    """Pairs (reference, case) of one source with the same configuration (``PAIR_KEY``: D, tree, drafter, model,
    GPUs, dataset, ... and split; isl and osl within ``PAIR_LENGTH_TOLERANCE``) at two batch sizes, the reference
    being the group's smallest batch; only cases with a published speedup and D. A pair never spans the split (the
    two cases judge the same side)."""
    groups: dict = {}
    for m in measurements:
        if m.draft_len is not None and m.speedup is not None:
            workloads = groups.setdefault(tuple(getattr(m, k) for k in PAIR_KEY), [])
            for cases in workloads:  # the first workload whose lengths this case's agree with
                if _same_length(cases[0].isl, m.isl) and _same_length(cases[0].osl, m.osl):
                    cases.append(m)
                    break
            else:
                workloads.append([m])
    out = []
    for cases in (c for workloads in groups.values() for c in workloads):
        ref = min(cases, key=lambda c: c.batch)
        out += [(ref, c) for c in cases if c.batch != ref.batch]
    return out


def ratio_prediction(ref, case, *, pricing: str = "perf-db", engines: dict | None = None) -> float:
    """Predicted ``speedup(B) / speedup(B_ref)`` of a pair at one D (AL cancels: both steps are priced at AL 1)."""
    out = []
    for m in (ref, case):
        setup = setup_case(m, pricing=pricing, need_al=False)
        s0, sd = steps(setup, case_pricer(setup, (engines or {}).get(m.engine)))
        out.append(s0 / sd)
    return out[1] / out[0]


def score_ratios(measurements, *, pricing: str = "perf-db", engines: dict | None = None) -> tuple[list, dict]:
    """``batch-ratio`` scores of every pair (``batch_pairs``) and ``{pair: reason}`` for pairs that cannot be priced."""
    scores, skipped = [], {}
    for ref, case in batch_pairs(measurements):
        name = f"{case.id} / B={ref.batch}"
        try:
            pred = ratio_prediction(ref, case, pricing=pricing, engines=engines)
        except RecipeError as exc:
            skipped[name] = str(exc)
            continue
        scores.append(Score(name, case.split, case.engine, case.sweep, case.draft_len,
                            float(case.speedup) / float(ref.speedup), pred, "batch-ratio"))
    return scores, skipped


def baseline_tokens_per_s(m) -> float | None:
    """The published no-speculation figure as tok/s (aggregate for ``output_tps_total``, per user otherwise)."""
    if m.metric == "tpot_ms":
        return 1e3 / m.baseline_tpot_ms if m.baseline_tpot_ms else None
    return m.baseline_tokens_per_s


def baseline_cases(measurements) -> list:
    """One case per distinct published baseline (model, GPUs, quant, engine, batch, lengths, figure): a source
    that repeats its baseline row beside every drafter counts once."""
    seen, out = set(), []
    for m in measurements:
        figure = baseline_tokens_per_s(m)
        key = (m.source, m.model, m.gpu, m.num_gpus, m.tp, m.quant, m.engine, m.batch, m.isl, m.osl, m.metric, figure)
        if figure is None or key in seen:
            continue
        seen.add(key)
        out.append(m)
    return out


def baseline_prediction(m, *, pricing: str = "perf-db", engine=None) -> float:
    """Predicted no-speculation tok/s of the case's batch (aggregate or per user as the case's metric)."""
    setup = setup_case(m, pricing=pricing, need_al=False)
    s0, _ = steps(setup, case_pricer(setup, engine))
    return (m.batch if m.metric == "output_tps_total" else 1) / s0


def score_baselines(measurements, *, pricing: str = "perf-db", engines: dict | None = None) -> tuple[list, dict]:
    """``baseline`` scores of every distinct published baseline and ``{case id: reason}`` for the unpriceable."""
    scores, skipped = [], {}
    for m in baseline_cases(measurements):
        try:
            pred = baseline_prediction(m, pricing=pricing, engine=(engines or {}).get(m.engine))
        except RecipeError as exc:
            skipped[m.id] = str(exc)
            continue
        scores.append(Score(m.id, m.split, m.engine, None, 0, float(baseline_tokens_per_s(m)), pred, "baseline"))
    return scores, skipped


def score_all(measurements, *, pricing: str = "perf-db", engines: dict | None = None) -> tuple[list, dict]:
    """Every mode's scores and ``{mode: {item: reason}}`` for what each mode could not score."""
    out, skipped = [], {}
    for mode, fn in (("speedup", score_cases), ("batch-ratio", score_ratios), ("baseline", score_baselines)):
        scores, why = fn(measurements, pricing=pricing, engines=engines)
        out += scores
        skipped[mode] = why
    return out, skipped


def summary(scores: list) -> dict:
    """Median and 90th percentile of |error|, speedups on the wrong side of 1, count."""
    errs = sorted(abs(s.error) for s in scores)
    if not errs:
        return {"cases": 0, "median_abs_error": None, "p90_abs_error": None, "wrong_side": 0}
    p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
    return {"cases": len(errs), "median_abs_error": statistics.median(errs), "p90_abs_error": p90,
            "wrong_side": sum(s.wrong_side for s in scores)}


def sweep_best_d(scores: list) -> dict:
    """Per published sweep over D (two or more draft lengths scored in a speedup mode): the published best
    configuration's D, the predicted best's D, their distance, and ``predicted_margin``: how much better the model
    thinks its pick is than the published best configuration (0 when they agree; small = a predicted near-tie)."""
    by: dict = {}
    for s in scores:
        if s.sweep is not None and s.mode in SPEEDUP_MODES:
            by.setdefault(s.sweep, []).append(s)
    out = {}
    for sweep, cases in by.items():
        if len({c.draft_len for c in cases}) < 2:
            continue
        pub = max(cases, key=lambda c: c.published)
        pred = max(cases, key=lambda c: c.predicted)
        out[sweep] = {"split": cases[0].split, "published_best_d": pub.draft_len, "predicted_best_d": pred.draft_len,
                      "distance": abs(pub.draft_len - pred.draft_len), "cases": len(cases),
                      "predicted_margin": pred.predicted / pub.predicted - 1.0}
    return out
