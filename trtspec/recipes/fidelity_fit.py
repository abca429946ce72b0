"""Fitting the engines' fixed costs and the verification rule on corpus figures (``trtspec.recipes.validation``).

``fit_items`` chooses, per engine (``recipes/engines/<engine>.yaml``), ``FITTED``: the overheads ``step_us``,
``spec_layer_us``, ``spec_request_us``, ``draft_forward_us`` (``spec_step_us`` stays 0: its share is carried per
layer) and ``verify_split``, the engine's verification-attention rule between packed (0) and split (1) query rows
(``trtspec.recipes.pricing``). Two stages, each parameter on the data that identifies it:

1. ``step_us`` on the published no-speculation figures at batch <= ``STEP_MAX_BATCH`` (a small batch decoding
   alone pins a step's absolute time; a speedup alone cannot tell a fixed cost per step from a faster kernel, both
   compress the ratio): one bounded 1-D search on the robust, source-weighted log error;
2. the speculative parameters and ``verify_split`` **once for all engines** on the log error of the speedups (both
   speedup modes of ``trtspec.recipes.fidelity``) and of the batch ratios (AL-free), each engine's ``step_us`` held.
   One set, because no engine has enough independent sources to fit its own without fitting its dominant source:
   leave-one-source-out, engine-specific speculative figures transfer worse (speedups: 16.3% median error against
   10.7% with one set, corpus of 2026-12-02, 215 cases / 30 sources). The same fit with ``verify_split`` held at
   each physical limit (``RULE_LIMITS``: packed 0, split 1) is reported beside it (``rms_log_error``): that is how
   the data decide the verification rule.

A step is linear in every fitted figure (the two verification-attention prices are blended linearly), so each case
is priced once with all of them at 0 (``linear_terms``: kernels) plus once per figure (its coefficient); the least
squares then runs on those numbers alone (``trtspec.recipes.validation.Item``), which is what makes a
leave-one-source-out refit per source cheap. An engine with fewer than ``MIN_BASELINES`` baselines shares the
pooled ``step_us``. Every residual is weighted by 1 / sqrt(its source's size) (``source_weights``) under a robust
loss (``LOSS``), so that no single published grid decides a figure. ``fit(measurements)`` is the same on the
corpus's ``split: train`` cases only (the secondary train / held-out table of ``benchmarks/bench_fidelity.py``).
"""
from __future__ import annotations

import math

from trtspec.recipes.fidelity import case_pricer, steps

FITTED = ("step_us", "spec_layer_us", "spec_request_us", "draft_forward_us", "verify_split")
SPEC_FITTED = FITTED[1:]
UPPER = {"verify_split": 1.0}  # a fraction; the overheads are unbounded above (microseconds >= 0)
MIN_BASELINES = 2
STEP_MAX_BATCH = 1
RULE_LIMITS = (0.0, 1.0)  # the two physical limits of the verification rule, each refitted for comparison
FIT_MODES = ("speedup", "speedup-source-al", "batch-ratio")  # what stage 2 fits (never predictions at a prior's AL)
LOSS, F_SCALE = "soft_l1", 0.1  # robust loss on log errors: residuals beyond ~10% weigh linearly, not squared
START = {"spec_layer_us": 20.0, "spec_request_us": 10.0, "draft_forward_us": 100.0, "verify_split": 0.5}


def linear_terms(setup) -> tuple[tuple, tuple]:
    """Each step as ``kernels + sum_i coef_i * param_i`` over ``FITTED`` (seconds per microsecond of an overhead,
    seconds per unit of ``verify_split``)."""
    from trtspec.recipes.engines import load_engine

    zero = load_engine(setup.request.engine).with_params(**{k: 0.0 for k in FITTED})
    k0, kd = steps(setup, case_pricer(setup, zero))
    coefs0, coefsd = [], []
    for name in FITTED:
        b0, bd = steps(setup, case_pricer(setup, zero.with_params(**{name: 1.0})))
        coefs0.append(b0 - k0)
        coefsd.append(bd - kd)
    return (k0, *coefs0), (kd, *coefsd)


def step_time(terms, x) -> float:
    """``kernels + sum_i coef_i * x_i`` of one step's ``linear_terms``, ``x`` the values of ``FITTED``."""
    return terms[0] + sum(c * v for c, v in zip(terms[1:], x))


def source_weights(items) -> list:
    """Per item 1 / sqrt(items of its source): every source weighs sqrt(its size), so that one large published
    grid cannot decide an engine's figures alone (the residuals are multiplied by the square root of these)."""
    counts: dict = {}
    for it in items:
        counts[it.source] = counts.get(it.source, 0) + 1
    return [1.0 / math.sqrt(counts[it.source]) for it in items]


def _solve(items: list, start: dict, step_us: dict, held: dict | None = None) -> dict:
    """The ``SPEC_FITTED`` figures by bounded robust least squares (``LOSS``) on the source-weighted log error of
    ``items`` (speedups and batch ratios), each item priced with its engine's ``step_us`` (``{engine: us}``) and the
    figures in ``held`` fixed. Returns the figures and, under ``"_rms"``, the root-mean-square log error
    (unweighted)."""
    import numpy as np
    from scipy.optimize import least_squares

    held = held or {}
    free = [k for k in SPEC_FITTED if k not in held]
    w = np.sqrt(np.array(source_weights(items))) if items else np.array([])

    def raw(x):
        vals = dict(zip(free, x), **held)
        spec = [vals[k] for k in SPEC_FITTED]
        return np.array([math.log(it.predict([step_us[it.engine], *spec]) / it.published) for it in items])

    if not items:
        return {**{k: start[k] for k in free}, **held, "_rms": 0.0}
    if not free:
        return {**held, "_rms": float(np.sqrt(np.mean(raw([]) ** 2)))}
    upper = np.array([UPPER.get(k, np.inf) for k in free])
    x0 = np.minimum(np.array([start[k] for k in free], dtype=float), upper)
    scale = np.array([1.0 if k in UPPER else max(start[k], 10.0) for k in free])
    res = least_squares(lambda x: w * raw(x), x0, bounds=(0.0, upper), x_scale=scale, loss=LOSS, f_scale=F_SCALE)
    return {**dict(zip(free, (float(v) for v in res.x))), **held, "_rms": float(np.sqrt(np.mean(raw(res.x) ** 2)))}


def _robust(r: float) -> float:
    """scipy's ``soft_l1`` loss of a residual ``r`` at scale ``F_SCALE`` (quadratic near 0, linear in the tails)."""
    z = (r / F_SCALE) ** 2
    return F_SCALE ** 2 * 2.0 * (math.sqrt(1.0 + z) - 1.0)


def _fit_step(items: list) -> float:
    """step_us minimising the source-weighted robust loss of the baselines' log errors (a 1-D bounded search)."""
    from scipy.optimize import minimize_scalar

    w = source_weights(items)

    def loss(x):
        return sum(wi * _robust(math.log(it.predict([x, 0.0, 0.0, 0.0, 0.0]) / it.published))
                   for wi, it in zip(w, items))

    return float(minimize_scalar(loss, bounds=(0.0, 5000.0), method="bounded").x)


def step_items(items) -> list:
    """The baselines that pin ``step_us``: batch <= ``STEP_MAX_BATCH``, one per (engine, model, GPU, TP, figure)."""
    seen, out = set(), []
    for it in items:
        if it.mode != "baseline" or it.batch > STEP_MAX_BATCH:
            continue
        key = (it.engine, it.tag("model"), it.tag("gpu"), it.tag("tp"), round(it.published, 3))
        if key not in seen:
            seen.add(key)
            out.append(it)
    return out


def fit_items(items, default_step_us: float | None = None) -> dict:
    """Fitted figures per engine on ``items`` (``trtspec.recipes.validation.Item``): ``{engine: {"params": {...},
    "cases": [ids], "step_pooled": bool, "baselines": [ids], "rms_log_error": {...}}}`` (see the module docstring;
    the speculative figures are the same for every engine). ``default_step_us``: ``step_us`` when no item pins it
    (else the shipped trtllm figure)."""
    from trtspec.recipes.engines import ENGINES, load_engine

    items = list(items)
    bases = {e: [it for it in step_items(items) if it.engine == e] for e in ENGINES}
    all_bases = [it for e in ENGINES for it in bases[e]]
    if default_step_us is None:
        default_step_us = load_engine("trtllm").params_us()["step_us"]
    pooled_step = _fit_step(all_bases) if all_bases else default_step_us
    step = {e: _fit_step(bases[e]) if len(bases[e]) >= MIN_BASELINES else pooled_step for e in ENGINES}
    spec = [it for it in items if it.mode in FIT_MODES]
    params = _solve(spec, START, step)
    rms = params.pop("_rms")
    limits = {f"verify_split={v:g}": _solve(spec, params, step, {"verify_split": v})["_rms"] for v in RULE_LIMITS}
    return {e: {"params": {"step_us": step[e], **params}, "step_pooled": len(bases[e]) < MIN_BASELINES,
                "baselines": [it.id for it in bases[e]], "cases": [it.id for it in spec],
                "own_cases": sum(it.engine == e for it in spec), "rms_log_error": {"fitted": rms, **limits}}
            for e in ENGINES}


def params_vector(fitted: dict, engine: str) -> list:
    """The ``FITTED`` values of one engine of a ``fit_items`` result, in order."""
    p = fitted[engine]["params"]
    return [p[k] for k in FITTED]


def fit(measurements) -> dict:
    """``fit_items`` on the corpus's ``split: train`` cases only."""
    from trtspec.recipes.validation import price_corpus

    items, _ = price_corpus([m for m in measurements if m.split == "train"])
    return fit_items(items)


def with_fitted(fitted: dict) -> dict:
    """Engine profiles with the fitted figures applied (``fit`` output -> ``{engine: EngineProfile}``)."""
    from trtspec.recipes.engines import load_engine

    return {e: load_engine(e).with_params(**f["params"]) for e, f in fitted.items()}
