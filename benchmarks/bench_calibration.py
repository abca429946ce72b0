"""Two-point deployment calibration on the published sweeps: calibrate on two points, predict the rest.

    python benchmarks/bench_calibration.py [--rule endpoints|smallest|both] [--min-points 4] [--points] [--json]

For every published sweep of the corpus (``recipes/measurements/``: cases sharing a ``sweep`` id) with at least
``--min-points`` points that the planner can price with their published D and AL (``trtspec.recipes.fidelity
.setup_case``), two points play a user's own measurements and ``trtspec.recipes.user_fit.fit`` -- what
``trtspec calibrate`` runs -- fits that deployment's engine figures on them; every other point of the sweep is then
predicted with the corpus fit (the engine file: *before*) and with the calibrated figures (*after*).

A sweep whose cases state no AL but share one D (a batch sweep: the corpus's batch-ratio assumption, acceptance
does not depend on the batch) is kept: its one AL is then fitted too, with the engine figures (``fit(...,
free_al=True)``; *before* uses the AL fitted with the corpus figures). That is a harder test than a user's (a user's
points carry their measured AL), reported as its own group (``al: fitted``); a sweep over D without published AL
cannot be predicted at all and is left out.

Each point is one published case. What it contributes and how it is scored: a case that publishes absolute figures
(aggregate tok/s; per-user tok/s x batch; 1000 / TPOT x batch) is a ``tokens_per_s`` point at its (B, D, AL), and
its published no-speculation figure at the same batch a D = 0 point beside it when calibrating; a case that
publishes only a speedup is a ``speedup`` point. A held-out point is scored on the figure it publishes (tok/s where
absolute, else the speedup: the *headline*), and separately on its speedup (every case has one).

The two calibration points (``--rule``): ``endpoints`` (default), the first and the last point of the sweep in
(batch, D, tree size) order -- the lowest and highest D of a sweep over D, the smallest and largest batch of a sweep
over batch: a user measures the ends of the range they serve and the rest is interpolated; ``smallest``, the first
two (the two smallest batches, or the two lowest D): the rest is extrapolated. Printed: median |error| before and
after, over all held-out points and per split (the corpus fit saw the ``train`` sweeps: their *before* is
optimistic), AL published or fitted, engine and drafter class, and per sweep. Target: median |error| after <= 6%
(headline, ``endpoints``), over all points and over the points of sweeps that publish their AL.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict

TARGET = 0.06
RULES = ("endpoints", "smallest")
GROUPS = ("al", "split", "engine", "drafter_class")


@dataclasses.dataclass
class SweepPoint:
    """A priced published case: its CaseSetup, published speedup and absolute (aggregate tok/s) figures."""

    case: object
    setup: object
    speedup: float | None
    spec_tps: float | None
    base_tps: float | None
    al_published: bool = True

    @property
    def order(self):
        return (self.case.batch, self.setup.draft_len, self.setup.nodes)


def _aggregate(m, per_request: float | None) -> float | None:
    return None if per_request is None else per_request * m.batch


def absolute_figures(m) -> tuple[float | None, float | None]:
    """(speculative, baseline) aggregate tok/s that the case publishes, else None."""
    if m.metric == "output_tps_total":
        return m.spec_tokens_per_s, m.baseline_tokens_per_s
    if m.metric == "output_tps_per_user":
        return _aggregate(m, m.spec_tokens_per_s), _aggregate(m, m.baseline_tokens_per_s)
    per = lambda ms: None if not ms else 1e3 / ms  # noqa: E731
    return _aggregate(m, per(m.spec_tpot_ms)), _aggregate(m, per(m.baseline_tpot_ms))


def _priced(m):
    """The case's CaseSetup and whether its AL is published (None: the case cannot be priced, with the reason)."""
    from trtspec.recipes.errors import RecipeError
    from trtspec.recipes.fidelity import published_al, setup_case

    try:
        if m.draft_len is not None and published_al(m) is None:
            return setup_case(m, need_al=False), False, None
        return setup_case(m), True, None
    except RecipeError as exc:
        return None, None, str(exc)


def sweep_points(measurements) -> tuple[dict, dict]:
    """``{sweep: [SweepPoint]}`` of the priceable cases and ``{sweep: reason}`` for sweeps left out. A sweep whose
    cases publish no AL is kept when every case has one D and tree (its AL is then fitted, shared)."""
    groups: dict = defaultdict(list)
    for m in measurements:
        if m.sweep is not None:
            groups[m.sweep].append(m)
    out, skipped = {}, {}
    for sweep, cases in groups.items():
        pts, why, published = [], defaultdict(int), set()
        for m in cases:
            s, has_al, reason = _priced(m)
            if s is None:
                why[reason] += 1
                continue
            spec, base = absolute_figures(m)
            speedup = m.speedup if m.speedup is not None else (spec / base if spec and base else None)
            if speedup is None and spec is None:
                why["neither a speedup nor absolute figures"] += 1
                continue
            pts.append(SweepPoint(m, s, speedup, spec, base, has_al))
            published.add(has_al)
        if published == {True, False}:
            pts = [p for p in pts if p.al_published]
        keys = {(p.case.model, p.case.gpu, p.setup.request.tp, p.case.quant, p.case.engine, p.case.drafter)
                for p in pts}
        shapes = {(p.setup.draft_len, p.setup.nodes, p.setup.topk) for p in pts}
        if len(keys) > 1:
            skipped[sweep] = f"{len(keys)} setups in one sweep"
        elif pts and not pts[0].al_published and len(shapes) > 1:
            skipped[sweep] = f"no published AL and {len(shapes)} draft lengths (each D's AL unknown)"
        elif len(pts) < 2:
            skipped[sweep] = f"{len(pts)} priceable points of {len(cases)}" + \
                (": " + "; ".join(f"{n} x {w}" for w, n in why.items()) if why else "")
        else:
            out[sweep] = sorted(pts, key=lambda p: p.order)
    return out, skipped


def choose(points: list, rule: str) -> tuple[list, list]:
    """(calibration points, held-out points) of one sweep by ``rule`` (module docstring)."""
    idx = [0, len(points) - 1] if rule == "endpoints" else [0, 1]
    return [points[i] for i in idx], [p for i, p in enumerate(points) if i not in idx]


def observations(points: list) -> list:
    """The calibration observations of ``points``: each case's own figure, plus its published D = 0 figure."""
    from trtspec.recipes.user_fit import Observation

    out, seen = [], set()
    for p in points:
        if p.spec_tps is not None:
            out.append(Observation(p.setup, "tokens_per_s", p.spec_tps, p.case.id))
            key = (p.case.batch, p.base_tps)
            if p.base_tps is not None and key not in seen:
                seen.add(key)
                base = dataclasses.replace(p.setup, draft_len=0, nodes=1, topk=1, al=1.0)
                out.append(Observation(base, "tokens_per_s", p.base_tps, f"{p.case.id} (D=0)"))
        else:
            out.append(Observation(p.setup, "speedup", p.speedup, p.case.id))
    return out


def _score(p: SweepPoint, profile, al: float | None) -> dict:
    """Predicted figures of ``p`` with ``profile`` (``al``: the sweep's fitted AL where none is published): the
    headline (its published figure) and the speedup, as predicted / published - 1."""
    from trtspec.recipes.fidelity import case_pricer, steps

    setup = p.setup if al is None else dataclasses.replace(p.setup, al=al)
    s0, sd = steps(setup, case_pricer(setup, profile))
    speedup, tps = setup.al * s0 / sd, p.case.batch * setup.al / sd
    out = {"speedup": speedup / p.speedup - 1.0 if p.speedup else None}
    out["tokens_per_s"] = tps / p.spec_tps - 1.0 if p.spec_tps is not None else None
    out["headline"] = out["tokens_per_s"] if p.spec_tps is not None else out["speedup"]
    return out


def run_sweep(points: list, rule: str, settings) -> dict:
    from trtspec.recipes.engines import load_engine
    from trtspec.recipes.user_fit import fit

    cal, rest = choose(points, rule)
    prior = load_engine(points[0].case.engine)
    free = not points[0].al_published
    res = fit(observations(cal), prior, points[0].setup.drafter.drafter_class, settings, free_al=free)
    rows = []
    for p in rest:
        b, a = _score(p, prior, res.al_before), _score(p, res.profile, res.al)
        rows.append({"id": p.case.id, "batch": p.case.batch, "draft_len": p.setup.draft_len,
                     "figure": "tokens_per_s" if p.spec_tps is not None else "speedup",
                     **{f"{k}_before": v for k, v in b.items()}, **{f"{k}_after": v for k, v in a.items()}})
    first = points[0]
    return {"engine": first.case.engine, "drafter_class": first.setup.drafter.drafter_class,
            "split": first.case.split, "al": "fitted" if free else "published",
            "calibrated_on": [p.case.id for p in cal], "points": rows,
            "fitted": {k: v["value"] for k, v in res.parameters.items() if v["fitted"]},
            "shared_al": res.summary.get("shared_al"), "converged": res.summary["converged"]}


def _median(values) -> float | None:
    vals = [abs(v) for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(results: dict, key: str = "headline") -> dict:
    """Median |error| before / after of ``key`` over every held-out point, and per split, engine, class."""
    def block(rows):
        return {"points": sum(r[f"{key}_after"] is not None for r in rows),
                "before": _median(r[f"{key}_before"] for r in rows), "after": _median(r[f"{key}_after"] for r in rows)}

    rows = [(res, r) for res in results.values() for r in res["points"]]
    out = {"all": block([r for _, r in rows]), "sweeps": len(results)}
    for field in GROUPS:
        groups = defaultdict(list)
        for res, r in rows:
            groups[res[field]].append(r)
        out[field] = {g: block(v) for g, v in sorted(groups.items())}
    return out


def _pct(x) -> str:
    return "  n/a" if x is None else f"{x * 100:5.1f}%"


def report(rule: str, results: dict, skipped: dict, show_points: bool) -> list[str]:
    which = "the first and last point" if rule == "endpoints" else "the first two points"
    lines = [f"== rule {rule}: calibrate on {which} of each sweep in (batch, D, tree size) order; "
             "median |error| before -> after =="]
    for key, label in (("headline", "headline (tok/s where published, else speedup)"), ("speedup", "speedup"),
                       ("tokens_per_s", "tok/s")):
        s = summarize(results, key)
        per = [_median(r[f"{key}_after"] for r in res["points"]) for res in results.values()]
        per = [v for v in per if v is not None]
        lines.append(f"{label}: {s['all']['points']} points of {s['sweeps']} sweeps: {_pct(s['all']['before'])} -> "
                     f"{_pct(s['all']['after'])}; {sum(v <= TARGET for v in per)} of {len(per)} sweeps at "
                     f"<= {TARGET:.0%} after")
        for field in GROUPS:
            lines.append(f"  by {field:13} " + "; ".join(f"{g} ({b['points']}): {_pct(b['before'])} -> "
                                                          f"{_pct(b['after'])}" for g, b in s[field].items()))
    for name, res in results.items():
        hb = _median(r["headline_before"] for r in res["points"])
        ha = _median(r["headline_after"] for r in res["points"])
        lines.append(f"  [{res['split']:7}] {name[:58]:58} {res['engine']:6} {res['drafter_class']:10} "
                     f"AL {res['al']:9} "
                     f"{len(res['points'])} held out: {_pct(hb)} -> {_pct(ha)}"
                     + ("" if res["converged"] else "  (fit not converged)"))
        if show_points:
            for r in res["points"]:
                lines.append(f"      B={r['batch']:<4} D={r['draft_len']:<2} {r['figure']:12} "
                             f"{r['headline_before']:+7.1%} -> {r['headline_after']:+7.1%}  {r['id']}")
            lines.append("      fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in res["fitted"].items())
                         + (f"; shared AL {res['shared_al']['before']:.3f} (corpus figures) -> "
                            f"{res['shared_al']['after']:.3f}" if res["shared_al"] else ""))
    for name, why in skipped.items():
        lines.append(f"  skipped {name}: {why}")
    return lines


def main(argv=None) -> int:
    from rich.progress import Progress

    from trtspec.recipes.measurements import load_measurements
    from trtspec.recipes.user_fit import FitSettings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", choices=RULES + ("both",), default="both")
    ap.add_argument("--min-points", type=int, default=4, help="sweeps with fewer priceable points are left out")
    ap.add_argument("--points", action="store_true", help="print every held-out point and the fitted figures")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sweeps, skipped = sweep_points(load_measurements())
    for name in [n for n, pts in sweeps.items() if len(pts) < args.min_points]:
        skipped[name] = f"{len(sweeps.pop(name))} priceable points (< {args.min_points})"
    rules = RULES if args.rule == "both" else (args.rule,)
    settings = FitSettings()
    results = {}
    with Progress(transient=True) as bar:
        task = bar.add_task("calibrating sweeps", total=len(sweeps) * len(rules))
        for rule in rules:
            results[rule] = {}
            for name, pts in sweeps.items():
                results[rule][name] = run_sweep(pts, rule, settings)
                bar.advance(task)
    if args.json:
        print(json.dumps({"target_median_after": TARGET, "skipped": skipped, "settings": dataclasses.asdict(settings),
                          "rules": {r: {"summary": {k: summarize(res, k) for k in ("headline", "speedup",
                                                                                      "tokens_per_s")},
                                        "sweeps": res} for r, res in results.items()}}, indent=2))
        return 0
    for rule in rules:
        print("\n".join(report(rule, results[rule], skipped if rule == rules[-1] else {}, args.points)))
    if "endpoints" in results:
        summ = summarize(results["endpoints"])
        parts = [("all points", summ["all"]["after"]), ("sweeps with published AL",
                                                        summ["al"].get("published", {}).get("after"))]
        print(f"target: two-point calibration (endpoints) leaves median |error| <= {TARGET:.0%} on the rest of each "
              "sweep: " + "; ".join(f"{name} {'met' if v is not None and v <= TARGET else 'MISSED'} "
                                    f"({_pct(v).strip()})" for name, v in parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
