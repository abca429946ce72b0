"""Fitting the engines' fixed costs and the verification rule on the corpus's ``split: train`` figures only.

``fit`` chooses, per engine (``recipes/engines/<engine>.yaml``), ``FITTED``: the overheads ``step_us``,
``spec_layer_us``, ``spec_request_us``, ``draft_forward_us`` (``spec_step_us`` stays 0: its share is carried per
layer) and ``verify_split``, the engine's verification-attention rule between packed (0) and split (1) query rows
(``trtspec.recipes.pricing``). Two stages, each parameter on the data that identifies it:

1. ``step_us`` on the batch-1 train cases' published no-speculation figures (one request decoding alone pins a
   step's absolute time; a speedup alone cannot tell a fixed cost per step from a faster kernel, both compress
   the ratio): one bounded 1-D search on the squared log error;
2. the speculative parameters and ``verify_split`` on the squared log error of the train speedups (both speedup
   modes of ``trtspec.recipes.fidelity``) and of the train batch ratios (AL-free), ``step_us`` held. The same fit
   with ``verify_split`` held at each physical limit (``RULE_LIMITS``: packed 0, split 1) is reported beside it
   (``train_rms_log_error``): that is how the train split decides the verification rule.

A step is linear in every fitted figure (the two verification-attention prices are blended linearly), so each case
is priced once with all of them at 0 (``linear_terms``: kernels) plus once per figure (its coefficient); the least
squares then runs on those numbers alone. An engine with fewer than ``MIN_CASES_PER_ENGINE`` train speedups and
ratios of its own shares the figures fitted on all engines' (pooled); one with fewer than ``MIN_BASELINES`` batch-1
baselines shares the pooled ``step_us``.
"""
from __future__ import annotations

import math

from trtspec.recipes.errors import RecipeError
from trtspec.recipes.fidelity import batch_pairs, case_pricer, setup_case, steps

FITTED = ("step_us", "spec_layer_us", "spec_request_us", "draft_forward_us", "verify_split")
SPEC_FITTED = FITTED[1:]
UPPER = {"verify_split": 1.0}  # a fraction; the overheads are unbounded above (microseconds >= 0)
MIN_BASELINES = 2
RULE_LIMITS = (0.0, 1.0)  # the two physical limits of the verification rule, each refitted for comparison
MIN_CASES_PER_ENGINE = 6


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


def _ratio(t0, td, x) -> float:
    s0 = t0[0] + sum(c * v for c, v in zip(t0[1:], x))
    sd = td[0] + sum(c * v for c, v in zip(td[1:], x))
    return s0 / sd


def _solve(rows: list, start: dict, pairs: list, step_us: float, held: dict | None = None) -> dict:
    """The ``SPEC_FITTED`` figures by bounded least squares on the log speedup of ``rows`` of (al, published,
    terms0, termsd) and the log batch ratio of ``pairs`` of (published ratio, ref terms, case terms), ``step_us``
    and the figures in ``held`` fixed. Returns the figures and, under ``"_rms"``, the root-mean-square log error."""
    import numpy as np
    from scipy.optimize import least_squares

    held = held or {}
    free = [k for k in SPEC_FITTED if k not in held]

    def full(x):
        vals = dict(zip(free, x), **held)
        return [step_us, *(vals[k] for k in SPEC_FITTED)]

    def resid(x):
        out = [math.log(al * _ratio(t0, td, full(x)) / pub) for al, pub, t0, td in rows]
        out += [math.log(_ratio(c0, cd, full(x)) / _ratio(r0, rd, full(x)) / ratio) for ratio, (r0, rd), (c0, cd) in pairs]
        return np.array(out)

    upper = np.array([UPPER.get(k, np.inf) for k in free])
    x0 = np.minimum(np.array([start[k] for k in free], dtype=float), upper)
    scale = np.array([1.0 if k in UPPER else max(start[k], 10.0) for k in free])
    res = least_squares(resid, x0, bounds=(0.0, upper), x_scale=scale)
    return {**dict(zip(free, (float(v) for v in res.x))), **held,
            "_rms": float(np.sqrt(np.mean(res.fun ** 2))) if len(res.fun) else 0.0}


def baseline_step(m) -> float | None:
    """The published no-speculation step time (seconds) of a batch-1 case, else None."""
    if m.batch != 1:
        return None
    if m.metric == "tpot_ms":
        return m.baseline_tpot_ms * 1e-3 if m.baseline_tpot_ms else None
    return 1.0 / m.baseline_tokens_per_s if m.baseline_tokens_per_s else None


def _baselines(measurements) -> dict:
    """Per engine: (published baseline step, kernel step, step coefficient, id) of the distinct batch-1 train
    baselines (one per model, GPU, TP and figure: a source that repeats its baseline row counts once)."""
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


def _train_rows(measurements) -> tuple[dict, dict, dict]:
    """Per engine: speedup rows, batch-ratio pairs and the ids used, from the train split."""
    from trtspec.recipes.engines import ENGINES

    rows: dict = {e: [] for e in ENGINES}
    pairs: dict = {e: [] for e in ENGINES}
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
    for ref, case in batch_pairs([m for m in measurements if m.split == "train"]):
        try:
            terms = [linear_terms(setup_case(c, need_al=False)) for c in (ref, case)]
        except RecipeError:
            continue
        pairs[case.engine].append((float(case.speedup) / float(ref.speedup), *terms))
        ids[case.engine].append(f"{case.id}/{ref.id}")
    return rows, pairs, ids


def fit(measurements) -> dict:
    """Fitted figures per engine on the ``train`` cases: ``{engine: {"params": {...}, "cases": [ids], "pooled":
    bool, "step_pooled": bool, "baselines": [ids]}}`` (see the module docstring)."""
    from trtspec.recipes.engines import ENGINES, load_engine

    bases = _baselines(measurements)
    pooled_step = _fit_step([r for e in ENGINES for r in bases[e]]) if any(bases.values()) else \
        load_engine("trtllm").params_us()["step_us"]
    step = {e: _fit_step(bases[e]) if len(bases[e]) >= MIN_BASELINES else pooled_step for e in ENGINES}
    rows, pairs, ids = _train_rows(measurements)
    if not any(rows.values()):
        raise RecipeError("no scorable train case in the corpus: nothing to fit")
    cur = load_engine("trtllm")
    start = {**{k: max(v, 10.0) for k, v in cur.params_us().items() if k in SPEC_FITTED}, "verify_split": 0.5}
    out = {}
    all_rows, all_pairs = [r for e in ENGINES for r in rows[e]], [p for e in ENGINES for p in pairs[e]]
    pooled = _solve(all_rows, start, all_pairs, pooled_step)
    for e in ENGINES:
        own = len(rows[e]) + len(pairs[e]) >= MIN_CASES_PER_ENGINE
        params = _solve(rows[e], pooled, pairs[e], step[e]) if own else dict(pooled)
        rms = params.pop("_rms")
        limits = {f"verify_split={v:g}": _solve(rows[e] if own else all_rows, pooled, pairs[e] if own else all_pairs,
                                                step[e] if own else pooled_step, {"verify_split": v})["_rms"]
                  for v in RULE_LIMITS}
        out[e] = {"params": {"step_us": step[e], **params}, "pooled": not own,
                  "step_pooled": len(bases[e]) < MIN_BASELINES, "baselines": [r[3] for r in bases[e]],
                  "cases": ids[e] if own else [i for x in ENGINES for i in ids[x]],
                  "train_rms_log_error": {"fitted": rms, **limits}}
    return out


def with_fitted(fitted: dict) -> dict:
    """Engine profiles with the fitted figures applied (``fit`` output -> ``{engine: EngineProfile}``)."""
    from trtspec.recipes.engines import load_engine

    return {e: load_engine(e).with_params(**f["params"]) for e, f in fitted.items()}
