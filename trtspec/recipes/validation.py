"""Leave-one-source-out (LOSO) validation: every corpus figure predicted by a fit that never saw its source.

The corpus (``trtspec.recipes.measurements``) is priced once (``price_corpus``): every figure that a scoring mode of
``trtspec.recipes.fidelity`` accepts becomes an ``Item`` holding its steps as linear terms in the engines' fitted
figures (``trtspec.recipes.fidelity_fit.linear_terms``), its published value and its tags (engine, drafter class,
GPU family, quant, batch band). Then, for each source s (a blog post, a pull request, a paper: the ``source`` field),
the engines' figures are refitted on every other source's items (``fidelity_fit.fit_items``) and s's items are
predicted with them (``loso``). No figure fitted on a source is ever used to predict that source: a source's
configurations (its hardware, its engine build, its benchmark harness) are unknown to the model that predicts it,
as they are for a user's own deployment.

The pure roofline (``pricing="roofline"``: the analytic model with the GPU files' fixed costs, nothing fitted) is
priced beside every item (``Item.roofline``).

On top of the LOSO predictions:

* ``interval_table`` -- per interval class (the drafter class, ``+moe`` for a target with routed experts:
  ``trtspec.recipes.intervals.interval_class``), the ``INTERVAL_LEVEL`` (70th) percentile q of the speedup modes'
  absolute LOSO log residuals |log(predicted / published)|: a predicted speedup p gets the interval
  ``[p / e^q, p * e^q]``; a class with fewer than ``MIN_CLASS_CASES`` cases uses every class's residuals.
  Symmetric, because a source's bias can have either sign: percentiles of the signed residuals (10th / 90th)
  follow the sign of the largest sources and cover 74% of the cases nested at a median width of 66%, the
  symmetric 70th percentile 75% at 50% (corpus of 2026-12-02). Per interval class rather than per drafter class
  alone, because MoE targets' residuals are about twice dense targets' (``intervals.interval_class``): one
  percentile for both made MoE intervals too narrow (10 wrong-side cases outside a straddling interval, all MoE
  targets) and dense ones too wide;
* ``nested_coverage`` -- how often those intervals cover the published speedup when the quantiles themselves are
  computed without the predicted case's source (the honest coverage of a case added later);
* ``regret`` -- per published sweep over D at one batch (each tested configuration's published AL given): the
  planner's pick is the configuration of highest predicted speedup; regret = 1 - published(pick) / published(best).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from trtspec.recipes.errors import RecipeError

GPU_FAMILY = {"a100": "ampere", "l40s": "ada", "h100": "hopper", "h100-pcie": "hopper", "h200": "hopper",
              "h20": "hopper",
              "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell",
              "rtx-pro-6000": "blackwell-rtx"}
DRAFTER_CLASS_NAMES = {"sequential": "sequential", "parallel": "parallel", "lookup": "host-side"}
BATCH_BANDS = ((1, "1"), (8, "2-8"), (32, "9-32"), (128, "33-128"), (10 ** 9, ">128"))
INTERVAL_LEVEL = 0.70       # cost-model intervals: this percentile of |log residual|, both sides
INTERVAL_QUANTILES = (0.10, 0.90)  # acceptance spread around a prior: these percentiles of log(AL / prior AL)
MIN_CLASS_CASES = 8
SPEEDUP_MODES = ("speedup", "speedup-source-al")


def batch_band(batch: int) -> str:
    return next(name for top, name in BATCH_BANDS if batch <= top)


@dataclass(frozen=True)
class Item:
    """One scorable figure, priced as linear terms (see the module docstring).

    ``terms``: ``((t0, td),)`` for a speedup or a baseline (the steps at D = 0 and at the published D), ``((r0, rd),
    (c0, cd))`` for a batch ratio (reference and case); each ``t`` is ``(kernels, coef_1, ...)`` over
    ``fidelity_fit.FITTED``. ``scale``: tokens per step of a baseline figure (B aggregate, 1 per user)."""

    mode: str
    id: str
    source: str
    engine: str
    split: str
    sweep: str | None
    draft_len: int
    batch: int
    published: float
    al: float
    terms: tuple
    scale: float = 1.0
    tags: tuple = ()
    roofline: float | None = None
    config: str = ""

    def tag(self, key: str):
        return dict(self.tags).get(key)

    def predict(self, x) -> float:
        """The prediction under the ``FITTED`` values ``x``."""
        from trtspec.recipes.fidelity_fit import step_time

        if self.mode == "baseline":
            return self.scale / step_time(self.terms[0][0], x)
        ratio = step_time(self.terms[0][0], x) / step_time(self.terms[0][1], x)
        if self.mode == "batch-ratio":
            return step_time(self.terms[1][0], x) / step_time(self.terms[1][1], x) / ratio
        return self.al * ratio


@dataclass(frozen=True)
class Prediction:
    """An item and its LOSO prediction (``predicted``); ``error`` = predicted / published - 1."""

    item: Item
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.item.published - 1.0

    @property
    def log_residual(self) -> float:
        return math.log(self.predicted / self.item.published)

    @property
    def wrong_side(self) -> bool:
        return self.item.mode.startswith("speedup") and (self.predicted > 1.0) != (self.item.published > 1.0)


def _tags(m, setup) -> tuple:
    from trtspec.recipes.drafters import DRAFTER_CLASS

    from trtspec.recipes.intervals import interval_class

    cls = DRAFTER_CLASS[setup.drafter.kind] if setup.draft_len else "none"
    icls = interval_class(setup.drafter.kind, setup.request.model) if setup.draft_len else "none"
    return (("drafter_class", DRAFTER_CLASS_NAMES.get(cls, cls)), ("interval_class", icls), ("drafter", m.drafter),
            ("gpu_family", GPU_FAMILY.get(m.gpu, m.gpu)), ("gpu", m.gpu), ("quant", setup.request.quant),
            ("batch_band", batch_band(m.batch)), ("model", m.model), ("tp", setup.request.tp))


def _config(m) -> str:
    """What a planner chooses within a published sweep: D and the tree shape."""
    return f"D={m.draft_len}" + (f" tree {m.tree_nodes}/top-{m.topk}" if m.tree_nodes else "")


def _speedup_items(measurements, skipped: dict) -> list:
    from trtspec.recipes.fidelity import setup_case, speedup_mode
    from trtspec.recipes.fidelity_fit import linear_terms

    out = []
    for m in measurements:
        try:
            setup = setup_case(m)
            terms = linear_terms(setup)
        except RecipeError as exc:
            skipped.setdefault("speedup", {})[m.id] = str(exc)
            continue
        out.append(Item(speedup_mode(m), m.id, m.source, m.engine, m.split, m.sweep, setup.draft_len, m.batch,
                        float(m.speedup), setup.al, (terms,), tags=_tags(m, setup), config=_config(m)))
    return out


def _ratio_items(measurements, skipped: dict) -> list:
    from trtspec.recipes.fidelity import batch_pairs, setup_case
    from trtspec.recipes.fidelity_fit import linear_terms

    out = []
    for ref, case in batch_pairs(measurements):
        name = f"{case.id} / B={ref.batch}"
        try:
            setups = [setup_case(c, need_al=False) for c in (ref, case)]
            terms = tuple(linear_terms(s) for s in setups)
        except RecipeError as exc:
            skipped.setdefault("batch-ratio", {})[name] = str(exc)
            continue
        out.append(Item("batch-ratio", name, case.source, case.engine, case.split, case.sweep, setups[1].draft_len,
                        case.batch, float(case.speedup) / float(ref.speedup), 1.0, terms, tags=_tags(case, setups[1]),
                        config=_config(case)))
    return out


def _baseline_items(measurements, skipped: dict) -> list:
    from trtspec.recipes.fidelity import baseline_cases, baseline_tokens_per_s, setup_case
    from trtspec.recipes.fidelity_fit import linear_terms

    out = []
    for m in baseline_cases(measurements):
        try:
            setup = setup_case(m, need_al=False)
            terms = linear_terms(setup)
        except RecipeError as exc:
            skipped.setdefault("baseline", {})[m.id] = str(exc)
            continue
        scale = float(m.batch if m.metric == "output_tps_total" else 1)
        out.append(Item("baseline", m.id, m.source, m.engine, m.split, None, 0, m.batch,
                        float(baseline_tokens_per_s(m)), 1.0, (terms,), scale=scale,
                        tags=_tags(m, setup) + (("metric", m.metric),), config="D=0"))
    return out


PRIOR_DRAFTERS = ("eagle3", "mtp", "dflash", "dspark", "draft_model", "ngram", "sa")


def prior_al(m, draft_len: int) -> tuple[float, str] | None:
    """(AL, prior name) of the closest published prior for the case's drafter and model at ``draft_len``, priors
    from the case's own source left out; None where there is none (``trtspec.recipes.priors``)."""
    from trtspec.recipes.fidelity import architecture_for
    from trtspec.recipes.priors import closest_prior

    if m.drafter not in PRIOR_DRAFTERS or m.tree_nodes:
        return None
    match = closest_prior(m.drafter, architecture_for(m.model), exclude_sources=(m.source,))
    return None if match is None else (match.profile.expected_al(draft_len), match.name)


def _prior_items(measurements, skipped: dict) -> list:
    """``speedup-prior``: every case with a published speedup and D predicted as a user who measured nothing would
    get it, with the closest published prior's AL (never fitted on)."""
    from trtspec.recipes.fidelity import setup_case
    from trtspec.recipes.fidelity_fit import linear_terms

    out = []
    for m in measurements:
        if m.speedup is None or m.draft_len is None:
            continue
        try:
            setup = setup_case(m, need_al=False)
            found = prior_al(m, setup.draft_len)
            if found is None:
                raise RecipeError(f"no published {m.drafter} prior for a chain")
            # priced at the prior's AL: a served figure's prefill share grows with it (trtspec.recipes.serving)
            terms = linear_terms(dataclasses.replace(setup, al=found[0]))
        except RecipeError as exc:
            skipped.setdefault("speedup-prior", {})[m.id] = str(exc)
            continue
        out.append(Item("speedup-prior", m.id, m.source, m.engine, m.split, m.sweep, setup.draft_len, m.batch,
                        float(m.speedup), found[0], (terms,), tags=_tags(m, setup) + (("prior", found[1]),),
                        config=_config(m)))
    return out


def acceptance_spread(measurements, quantiles=INTERVAL_QUANTILES) -> dict:
    """Per drafter (and ``all``): quantiles of log(published AL / closest prior's AL at that D) over the chain cases
    that publish their AL, each case's own source's priors left out."""
    from trtspec.recipes.fidelity import published_al

    ratios: dict = {}
    for m in measurements:
        al = published_al(m)
        if al is None or m.draft_len is None:
            continue
        try:
            found = prior_al(m, m.draft_len)
        except RecipeError:
            continue
        if found is not None:
            ratios.setdefault(m.drafter, []).append(math.log(al / found[0]))
    pooled = [r for v in ratios.values() for r in v]
    out = {"all": {"cases": len(pooled), "log_ratio_q": [_quantile(pooled, q) for q in quantiles] if pooled
                   else [0.0, 0.0]}}
    for k, v in sorted(ratios.items()):
        own = len(v) >= MIN_CLASS_CASES
        out[k] = {"cases": len(v), "log_ratio_q": [_quantile(v if own else pooled, q) for q in quantiles],
                  "pooled": not own}
    return out


def _roofline(items: list, measurements) -> list:
    """``items`` with ``roofline`` set: the analytic model's prediction of each (nothing fitted)."""
    import dataclasses

    from trtspec.recipes.fidelity import score_all

    scores, _ = score_all(measurements, pricing="roofline")
    roof = {(("speedup" if s.mode in SPEEDUP_MODES else s.mode), s.id): s.predicted for s in scores}
    return [dataclasses.replace(it, roofline=roof.get((("speedup" if it.mode in SPEEDUP_MODES else it.mode), it.id)))
            if it.mode != "speedup-prior" else it for it in items]


def price_corpus(measurements, *, roofline: bool = False, progress=None) -> tuple[list, dict]:
    """Every scorable figure of ``measurements`` as an ``Item`` and ``{mode: {id: reason}}`` for the others.
    ``roofline``: also price each with the pure roofline; ``progress``: called with a label per stage."""
    skipped: dict = {}
    items = []
    for label, fn in (("speedups", _speedup_items), ("batch ratios", _ratio_items), ("baselines", _baseline_items),
                      ("prior speedups", _prior_items)):
        if progress:
            progress(label)
        items += fn(measurements, skipped)
    if roofline:
        if progress:
            progress("roofline")
        items = _roofline(items, measurements)
    return items, skipped


def loso(items, *, fit=None) -> list:
    """Each item predicted with the engines' figures fitted on every other source's items (``fit``: the fitting
    function, default ``fidelity_fit.fit_items``)."""
    from trtspec.recipes.fidelity_fit import FITTED, fit_items

    fit = fit or fit_items
    out = []
    for source in sorted({it.source for it in items}):
        fitted = fit([it for it in items if it.source != source])
        for it in (i for i in items if i.source == source):
            x = [fitted[it.engine]["params"][k] for k in FITTED]
            out.append(Prediction(it, it.predict(x)))
    return out


def in_sample(items, fitted: dict) -> list:
    """Each item predicted with one set of fitted figures (``fidelity_fit.fit_items`` output)."""
    from trtspec.recipes.fidelity_fit import FITTED

    return [Prediction(it, it.predict([fitted[it.engine]["params"][k] for k in FITTED])) for it in items]


def summary(preds) -> dict:
    """Median and 90th percentile of |error|, speedups on the wrong side of 1, count."""
    errs = sorted(abs(p.error) for p in preds)
    if not errs:
        return {"cases": 0, "median_abs_error": None, "p90_abs_error": None, "wrong_side": 0}
    p90 = errs[min(len(errs) - 1, math.ceil(0.9 * len(errs)) - 1)]
    return {"cases": len(errs), "median_abs_error": statistics.median(errs), "p90_abs_error": p90,
            "wrong_side": sum(p.wrong_side for p in preds)}


def roofline_predictions(items) -> list:
    """The roofline's prediction of each item that has one."""
    return [Prediction(it, it.roofline) for it in items if it.roofline is not None]


def by_tag(preds, key: str) -> dict:
    """``{tag value: [predictions]}``."""
    out: dict = {}
    for p in preds:
        out.setdefault(str(p.item.tag(key)), []).append(p)
    return dict(sorted(out.items()))


# ---- intervals ----------------------------------------------------------------------------------------------------


def _quantile(values: list, q: float) -> float:
    """Linear-interpolation quantile (numpy's default rule) of a non-empty list."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def interval_class(item) -> str:
    """An item's interval class (``trtspec.recipes.intervals.interval_class``), else its drafter class."""
    return str(item.tag("interval_class") or item.tag("drafter_class"))


def interval_table(preds, level: float = INTERVAL_LEVEL, min_cases: int = MIN_CLASS_CASES) -> dict:
    """Per interval class (drafter class, ``+moe`` for targets with routed experts; and ``all``):
    ``{"cases": n, "log_residual_q": [-q, q], "pooled": bool}`` with q the ``level`` percentile of |log residual|
    of the speedup-mode LOSO predictions ``preds`` in the class (module docstring)."""
    sp = [p for p in preds if p.item.mode in SPEEDUP_MODES]
    if not sp:
        raise RecipeError("no speedup predictions: no interval can be derived")
    pooled = [abs(p.log_residual) for p in sp]
    q = _quantile(pooled, level)
    out = {"all": {"cases": len(pooled), "log_residual_q": [-q, q], "pooled": True}}
    groups: dict = {}
    for p in sp:
        groups.setdefault(interval_class(p.item), []).append(p)
    for cls, group in sorted(groups.items()):
        res = [abs(p.log_residual) for p in group]
        own = len(res) >= min_cases
        q = _quantile(res if own else pooled, level)
        out[cls] = {"cases": len(res), "log_residual_q": [-q, q], "pooled": not own}
    return out


def interval(predicted: float, entry: dict) -> tuple[float, float]:
    """The interval of a predicted speedup under one ``interval_table`` entry."""
    q_lo, q_hi = entry["log_residual_q"]
    return predicted * math.exp(-q_hi), predicted * math.exp(-q_lo)


def nested_coverage(preds, level: float = INTERVAL_LEVEL, modes=SPEEDUP_MODES, spread: dict | None = None) -> dict:
    """Coverage and width of the intervals when each source's residual quantiles come from the other sources only:
    ``{"cases", "covered", "coverage", "median_rel_width", "straddle", "wrong_side_outside", "rows"}`` (relative
    width = (hi - lo) / predicted; ``wrong_side_outside``: wrong-side cases whose interval does not straddle 1).
    ``modes``: which predictions (default the speedup modes); ``spread``: ``acceptance_spread`` output, widening
    each interval by its drafter's AL spread (the predictions at a prior's AL)."""
    sp = [p for p in preds if p.item.mode in modes]
    fit_on = [p for p in preds if p.item.mode in SPEEDUP_MODES]
    covered, widths, straddle, wrong = 0, [], 0, 0
    rows = []
    for source in sorted({p.item.source for p in sp}):
        others = [p for p in fit_on if p.item.source != source]
        if not others:
            continue
        table = interval_table(others, level)
        for p in (x for x in sp if x.item.source == source):
            entry = table.get(interval_class(p.item), table.get(p.item.tag("drafter_class"), table["all"]))
            lo, hi = interval(p.predicted, entry)
            if spread is not None:
                a_lo, a_hi = spread.get(p.item.tag("drafter"), spread["all"])["log_ratio_q"]
                lo, hi = lo * math.exp(a_lo), hi * math.exp(a_hi)
            hit = lo <= p.item.published <= hi
            covered += hit
            widths.append((hi - lo) / p.predicted)
            crosses = lo < 1.0 < hi
            straddle += crosses
            wrong += p.wrong_side and not crosses
            rows.append((p, lo, hi, hit))
    n = len(rows)
    return {"cases": n, "covered": covered, "coverage": covered / n if n else None,
            "median_rel_width": statistics.median(widths) if widths else None, "straddle": straddle,
            "wrong_side_outside": wrong, "rows": rows}


# ---- decisions ----------------------------------------------------------------------------------------------------


def regret(preds, tie: float | None = None) -> dict:
    """Per published sweep over configurations at one batch (speedup modes, >= 2 configurations, each with its
    published AL): the published best, the planner's pick and ``regret`` = 1 - published(pick) / published(best).
    The pick follows the planner's rule (``optimizer._choose``): the smallest D (then the fewest tree nodes) whose
    predicted speedup is within ``tie`` (default: the measured-pricing tie tolerance) of the highest."""
    from trtspec.recipes.optimizer import MEASURED_TIE_TOLERANCE

    tie = MEASURED_TIE_TOLERANCE if tie is None else tie
    groups: dict = {}
    for p in preds:
        it = p.item
        if it.mode in SPEEDUP_MODES and it.sweep is not None:
            groups.setdefault((it.sweep, it.batch), []).append(p)
    out = {}
    for (sweep, batch), ps in groups.items():
        if len({p.item.config for p in ps}) < 2:
            continue
        best = max(ps, key=lambda p: p.item.published)
        top = max(p.predicted for p in ps)
        pick = min((p for p in ps if p.predicted >= top * (1.0 - tie)),
                   key=lambda p: (p.item.draft_len, p.item.config != f"D={p.item.draft_len}", -p.predicted))
        out[f"{sweep} @B={batch}"] = {"best": best.item.config, "pick": pick.item.config, "configs": len(ps),
                                      "regret": 1.0 - pick.item.published / best.item.published,
                                      "source": best.item.source}
    return out




# ---- the no-speculation baseline: the op-by-op step beside aiconfigurator-core's whole step ------------------------


def aic_baseline_items(items, measurements, progress=None) -> tuple[list, dict]:
    """The baseline ``items`` re-priced with aiconfigurator-core's whole generation step (``trtspec.recipes.aic_step``)
    as the kernel time, the engine's ``step_us`` on top as in the op-by-op model; ``{id: reason}`` for baselines it
    cannot price."""
    import dataclasses

    from trtspec.recipes.aic_step import whole_step
    from trtspec.recipes.fidelity import setup_case

    by_id = {m.id: m for m in measurements}
    out, skipped = [], {}
    for it in (i for i in items if i.mode == "baseline"):
        if progress:
            progress(it.id)
        try:
            kernels = whole_step(setup_case(by_id[it.id], need_al=False))
        except RecipeError as exc:
            skipped[it.id] = str(exc)
            continue
        t0 = it.terms[0][0]
        terms = ((kernels, t0[1], *([0.0] * (len(t0) - 2))),) * 2
        out.append(dataclasses.replace(it, terms=(terms,)))
    return out, skipped


def combined_items(a: list, b: list, weight: float = 0.5) -> list:
    """Items whose kernel time is the geometric combination ``a^(1-w) * b^w`` of two pricings of the same figures
    (matched by id; only ids in both)."""
    import dataclasses

    other = {it.id: it for it in b}
    out = []
    for it in a:
        if it.id not in other:
            continue
        ka, kb = it.terms[0][0][0], other[it.id].terms[0][0][0]
        t0 = it.terms[0][0]
        terms = ((ka ** (1 - weight) * kb ** weight, *t0[1:]),) * 2
        out.append(dataclasses.replace(it, terms=(terms,)))
    return out
