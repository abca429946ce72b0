"""Predictions against the published corpus (``trtspec.recipes.measurements``): score the planner, fit the engines.

For each published case the planner predicts the speedup of the published configuration over no speculation at
the same batch, ``AL * step(B, 0) / step(B, D)``, with the published AL (``al``, else ``acceptance_curve[D-1]``):
the corpus judges the *cost* model, so acceptance is taken as published and a case that publishes neither AL nor D
is not scored (``setup_case`` says why). The published configuration maps to a plan as follows:

* model: a built-in model whose ``source`` names the HF id, else aiconfigurator-core's ``model_configs/`` file of
  that id, else the same with a variant suffix removed (``-Instruct``, ``-Instruct-2507``, ``-FP8``, ``-NVFP4``,
  ``-Base``: same architecture, other weights);
* GPUs: ``tp``, else ``num_gpus``, else the smallest of 1, 2, 4, 8 GPUs whose memory holds the weights
  (``UNSTATED_TP_FRACTION`` of it: the minimal deployment); ``ep`` (else 1; ignored when it does not divide
  ``tp``); quant
  ``nvfp4`` / ``mxfp4`` -> ``fp4``, ``mxfp8`` -> ``fp8``; ``native`` and ``int8_sq`` are not scored;
* drafter: ``eagle`` (EAGLE-1/2, one serial feature head) is priced as ``eagle3``; ``peagle`` (P-EAGLE: an
  EAGLE-3-style head drafting all D tokens in one pass) as a one-layer parallel drafter (``dflash`` with one
  layer); ``pard`` and ``medusa`` are not scored; ``draft_model`` needs the named draft's architecture;
* a tree verifies ``tree_nodes + 1`` tokens per request (the root counts) after ``draft_len`` draft steps of
  ``topk`` tokens each;
* context: ``isl + osl / 2`` (the mid-decode length) when both are stated, else ``DEFAULT_CONTEXT`` (1024 tokens:
  MT-bench-like chat turns);
* concurrency is taken as the batch (every client in flight).

``fit`` chooses the engines' overheads (``trtspec.recipes.engines.PARAMS``: ``step_us``, ``spec_layer_us``,
``spec_request_us``, ``draft_forward_us``; ``spec_step_us`` stays 0) on ``split: train`` cases only, in two stages:
``step_us`` on the batch-1 cases' published no-speculation figures (one request decoding alone pins a step's
absolute time; a speedup alone cannot tell a fixed cost per step from a faster kernel, both compress the ratio),
then the speculative parameters on the squared log error of the speedups. A step is linear in the overheads, so
each case is priced once (kernels) plus once per parameter (its coefficient). Pairs of one sweep at two batch sizes (``batch_pairs``) add their AL-free batch ratio. An engine
with fewer than ``MIN_CASES_PER_ENGINE`` scored train cases and pairs shares the parameters fitted on all of them.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from trtspec.recipes.errors import RecipeError

DEFAULT_CONTEXT = 1024
UNSTATED_TP_FRACTION = 0.95
FITTED = ("step_us", "spec_layer_us", "spec_request_us", "draft_forward_us")
SPEC_FITTED = FITTED[1:]
MIN_BASELINES = 2
MIN_CASES_PER_ENGINE = 6
VARIANT_SUFFIXES = ("-Instruct-2507", "-Instruct", "-FP8", "-NVFP4", "-Base")
QUANT_MAP = {"none": "none", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4", "int4_awq": "int4_awq",
             "w4a8_awq": "w4a8_awq"}


@dataclass(frozen=True)
class CaseSetup:
    """A published case as a plan: the request (one batch), the drafter, D, verified tokens, width and AL."""

    case: object
    request: object
    drafter: object
    draft_len: int
    nodes: int
    topk: int
    al: float


@dataclass(frozen=True)
class Score:
    id: str
    split: str
    engine: str
    sweep: str | None
    draft_len: int
    published: float
    predicted: float

    @property
    def error(self) -> float:
        """predicted / published - 1."""
        return self.predicted / self.published - 1.0

    @property
    def wrong_side(self) -> bool:
        """Predicted and published disagree on whether speculation wins (speedup > 1)."""
        return (self.predicted > 1.0) != (self.published > 1.0)


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
    if m.drafter in ("mtp", "dflash", "dspark", "ngram", "sa"):
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
    al = m.al if m.al is not None else (m.acceptance_curve[m.draft_len - 1] if m.draft_len and m.acceptance_curve
                                        and len(m.acceptance_curve) >= m.draft_len else None)
    if al is None and need_al:
        raise RecipeError("no acceptance length published")
    al = 1.0 if al is None else al
    if m.quant not in QUANT_MAP:
        raise RecipeError(f"quant {m.quant!r} is not one trtspec prices")
    arch = architecture_for(m.model)
    spec = _drafter(m, arch)
    tp = m.tp or m.num_gpus or _minimal_tp(arch, load_gpu(m.gpu), QUANT_MAP[m.quant])
    ep = m.ep if m.ep and tp % m.ep == 0 else 1
    context = m.isl + m.osl // 2 if m.isl and m.osl else DEFAULT_CONTEXT
    nodes = (m.tree_nodes + 1) if m.tree_nodes else draft_len + 1
    topk = (m.topk or 1) if m.tree_nodes else 1
    dummy = AcceptanceProfile(rates=(0.5,), source="fidelity: the published AL is used directly")
    req = PlanRequest(model=arch, gpu=load_gpu(m.gpu), drafters=(spec,), acceptance={spec.kind: dummy}, tp=tp, ep=ep,
                      quant=QUANT_MAP[m.quant], batches=(m.batch,), context=context,
                      max_draft_len=max(16, draft_len), engine=m.engine, pricing=pricing)
    return CaseSetup(m, req, spec, draft_len, nodes, topk, float(al))


def _steps(setup: CaseSetup, pricer) -> tuple[float, float]:
    """(step at D = 0, step of the published configuration), seconds."""
    from trtspec.recipes.optimizer import _Evaluator

    ev = _Evaluator(setup.request, setup.case.batch, pricer)
    base = ev.point(setup.drafter, 0, 1.0, 1)
    spec = ev.point(setup.drafter, setup.draft_len, setup.al, setup.nodes, setup.topk)
    return base.step, spec.step


def _pricer(setup: CaseSetup, engine=None):
    from trtspec.recipes.optimizer import request_pricer
    from trtspec.recipes.pricing import Pricer

    base = request_pricer(setup.request)
    if base is None or engine is None:
        return base
    return Pricer(base.gpu, engine, base.db, base.note)


def predict(setup: CaseSetup, engine=None) -> float:
    """Predicted speedup of the case; ``engine``: an ``EngineProfile`` replacing the case engine's file."""
    s0, sd = _steps(setup, _pricer(setup, engine))
    return setup.al * s0 / sd


def linear_terms(setup: CaseSetup) -> tuple[tuple, tuple]:
    """Each step as ``kernels + sum_i coef_i * param_i`` over ``FITTED`` (seconds per microsecond of param)."""
    from trtspec.recipes.engines import load_engine

    zero = load_engine(setup.request.engine).with_params(**{k: 0.0 for k in FITTED})
    k0, kd = _steps(setup, _pricer(setup, zero))
    coefs0, coefsd = [], []
    for name in FITTED:
        b0, bd = _steps(setup, _pricer(setup, zero.with_params(**{name: 1.0})))
        coefs0.append(b0 - k0)
        coefsd.append(bd - kd)
    return (k0, *coefs0), (kd, *coefsd)


def score_cases(measurements, *, pricing: str = "perf-db", engines: dict | None = None) -> tuple[list, dict]:
    """Scores of every scorable case and ``{case id: reason}`` for the others; ``engines``: name -> profile."""
    scores, skipped = [], {}
    for m in measurements:
        try:
            setup = setup_case(m, pricing=pricing)
            pred = predict(setup, (engines or {}).get(m.engine))
        except RecipeError as exc:
            skipped[m.id] = str(exc)
            continue
        scores.append(Score(m.id, m.split, m.engine, m.sweep, m.draft_len, float(m.speedup), pred))
    return scores, skipped


def summary(scores: list) -> dict:
    """Median and 90th percentile of |error|, cases on the wrong side of 1, count."""
    errs = sorted(abs(s.error) for s in scores)
    if not errs:
        return {"cases": 0, "median_abs_error": None, "p90_abs_error": None, "wrong_side": 0}
    p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
    return {"cases": len(errs), "median_abs_error": statistics.median(errs), "p90_abs_error": p90,
            "wrong_side": sum(s.wrong_side for s in scores)}


def sweep_best_d(scores: list) -> dict:
    """Per published sweep over D (two or more draft lengths scored): the published best configuration's D, the
    predicted best's D and their distance."""
    by: dict = {}
    for s in scores:
        if s.sweep is not None:
            by.setdefault(s.sweep, []).append(s)
    out = {}
    for sweep, cases in by.items():
        if len({c.draft_len for c in cases}) < 2:
            continue
        pub = max(cases, key=lambda c: c.published)
        pred = max(cases, key=lambda c: c.predicted)
        out[sweep] = {"split": cases[0].split, "published_best_d": pub.draft_len, "predicted_best_d": pred.draft_len,
                      "distance": abs(pub.draft_len - pred.draft_len), "cases": len(cases)}
    return out


def baseline_step(m) -> float | None:
    """The published no-speculation step time (seconds) of a batch-1 case, else None (see the module docstring)."""
    if m.batch != 1:
        return None
    if m.metric == "tpot_ms":
        return m.baseline_tpot_ms * 1e-3 if m.baseline_tpot_ms else None
    return 1.0 / m.baseline_tokens_per_s if m.baseline_tokens_per_s else None


def batch_pairs(measurements) -> list:
    """Pairs (reference, case) of one published sweep with the same drafter, D and tree at two batch sizes (the
    reference: the sweep's smallest batch). Acceptance does not depend on the batch, so the published ratio
    speedup(B) / speedup(B_ref) needs no AL: these pairs judge (and fit) how the step costs grow with the batch."""
    groups: dict = {}
    for m in measurements:
        if m.sweep is not None and m.draft_len is not None:
            groups.setdefault((m.sweep, m.drafter, m.draft_len, m.tree_nodes, m.topk, m.dataset), []).append(m)
    out = []
    for cases in groups.values():
        ref = min(cases, key=lambda c: c.batch)
        out += [(ref, c) for c in cases if c.batch != ref.batch]
    return out


def _ratio(t0, td, x) -> float:
    s0 = t0[0] + sum(c * v for c, v in zip(t0[1:], x))
    sd = td[0] + sum(c * v for c, v in zip(td[1:], x))
    return s0 / sd


def _solve(rows: list, start: dict, pairs: list, step_us: float) -> dict:
    """The ``SPEC_FITTED`` parameters (microseconds, >= 0) by least squares on the log speedup of ``rows`` of (al,
    published, terms0, termsd) and the log batch ratio of ``pairs`` of (published ratio, ref terms, case terms),
    ``step_us`` held."""
    import numpy as np
    from scipy.optimize import least_squares

    def full(x):
        return [step_us, *x]

    def resid(x):
        out = [math.log(al * _ratio(t0, td, full(x)) / pub) for al, pub, t0, td in rows]
        out += [math.log(_ratio(c0, cd, full(x)) / _ratio(r0, rd, full(x)) / ratio) for ratio, (r0, rd), (c0, cd) in pairs]
        return np.array(out)

    x0 = np.array([start[k] for k in SPEC_FITTED], dtype=float)
    res = least_squares(resid, x0, bounds=(0.0, np.inf), x_scale=np.maximum(x0, 10.0))
    return {k: float(v) for k, v in zip(SPEC_FITTED, res.x)}


def _baselines(measurements) -> dict:
    """Per engine: (published baseline step, kernel step, step coefficient) of the distinct batch-1 train baselines
    (one per model, GPU, TP and figure: a source that repeats its baseline row counts once)."""
    from trtspec.recipes.engines import ENGINES

    out: dict = {e: [] for e in ENGINES}
    seen = set()
    for m in measurements:
        base = baseline_step(m)
        key = (m.engine, m.model, m.gpu, m.tp, m.quant, base)
        if m.split != "train" or base is None or key in seen:
            continue
        try:
            (k0, c_step, *_), _ = linear_terms(setup_case(m, need_al=False))
        except RecipeError:
            continue
        seen.add(key)
        out[m.engine].append((base, k0, c_step, m.id))
    return out


def _fit_step(rows: list) -> float:
    """step_us minimising the squared log error of the baselines (one parameter: a 1-D bounded search)."""
    from scipy.optimize import minimize_scalar

    res = minimize_scalar(lambda x: sum(math.log((k0 + c * x) / base) ** 2 for base, k0, c, _ in rows),
                          bounds=(0.0, 5000.0), method="bounded")
    return float(res.x)


def fit(measurements) -> dict:
    """Fitted overheads per engine on the ``train`` cases: ``{engine: {"params": {...}, "cases": [ids], "pooled":
    bool}}``. Two stages, each parameter on the data that identifies it: ``step_us`` on the batch-1 baselines
    (``_baselines``; an engine without ``MIN_BASELINES`` of its own takes the pooled value), then the speculative
    parameters on the speedups and batch ratios with ``step_us`` held (see the module docstring)."""
    from trtspec.recipes.engines import ENGINES, load_engine

    bases = _baselines(measurements)
    pooled_step = _fit_step([r for e in ENGINES for r in bases[e]]) if any(bases.values()) else \
        load_engine("trtllm").params_us()["step_us"]
    step = {e: _fit_step(bases[e]) if len(bases[e]) >= MIN_BASELINES else pooled_step for e in ENGINES}
    rows: dict = {e: [] for e in ENGINES}
    ids: dict = {e: [] for e in ENGINES}
    for m in measurements:
        if m.split != "train":
            continue
        try:
            setup = setup_case(m)
            rows[m.engine].append((setup.al, float(m.speedup), *linear_terms(setup)))
            ids[m.engine].append(m.id)
        except RecipeError:
            continue
    pairs: dict = {e: [] for e in ENGINES}
    for ref, case in batch_pairs([m for m in measurements if m.split == "train"]):
        try:
            terms = [linear_terms(setup_case(c, need_al=False)) for c in (ref, case)]
        except RecipeError:
            continue
        pairs[case.engine].append((float(case.speedup) / float(ref.speedup), *terms))
        ids[case.engine].append(f"{case.id}/{ref.id}")
    if not any(rows.values()):
        raise RecipeError("no scorable train case in the corpus: nothing to fit")
    start = {k: max(v, 10.0) for k, v in load_engine("trtllm").params_us().items() if k in SPEC_FITTED}
    out = {}
    pooled = _solve([r for e in ENGINES for r in rows[e]], start, [p for e in ENGINES for p in pairs[e]],
                    pooled_step)
    for e in ENGINES:
        own = len(rows[e]) + len(pairs[e]) >= MIN_CASES_PER_ENGINE
        params = _solve(rows[e], pooled, pairs[e], step[e]) if own else dict(pooled)
        out[e] = {"params": {"step_us": step[e], **params}, "pooled": not own,
                  "step_pooled": len(bases[e]) < MIN_BASELINES, "baselines": [r[3] for r in bases[e]],
                  "cases": ids[e] if own else [i for x in ENGINES for i in ids[x]]}
    return out


def with_fitted(fitted: dict) -> dict:
    """Engine profiles with the fitted parameters applied (``fit`` output -> ``{engine: EngineProfile}``)."""
    from trtspec.recipes.engines import load_engine

    return {e: load_engine(e).with_params(**f["params"]) for e, f in fitted.items()}

