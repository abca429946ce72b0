"""Planner fidelity on published measurements it has never seen: leave-one-source-out first, the roofline beside it.

    python benchmarks/bench_fidelity.py [--fit] [--write-intervals] [--no-aic] [--cases] [--worst N] [--json]

Every corpus figure (``recipes/measurements/*.yaml``) that a scoring mode of ``trtspec.recipes.fidelity`` accepts is
priced once as linear terms in the engines' fitted figures (``trtspec.recipes.validation.price_corpus``); then, for
each source (a post, a pull request, a paper), the engines' figures are refitted on every *other* source and that
source's figures are predicted (leave-one-source-out, LOSO: ``validation.loso``). Printed, measured-data model (LOSO)
beside the pure roofline (``--pricing roofline``: the analytic model, nothing fitted):

1. per mode -- ``speedup`` (published D and AL), ``speedup-source-al`` (an AL the source states elsewhere),
   ``batch-ratio`` (speedup(B) / speedup(B_ref), AL-free), ``baseline`` (published no-speculation tok/s), and
   ``speedup-prior`` (every case with D, at the closest published prior's AL: what a user who measured nothing
   gets): cases, median and 90th percentile of |predicted / published - 1|, speedups on the wrong side of 1;
2. the speedups (both AL modes) per engine, drafter class (sequential / parallel / host-side), GPU family, quant
   and batch band;
3. the no-speculation baseline, op-by-op (trtspec's kernels from aiconfigurator-core's tables + the engine's
   ``step_us``) beside aiconfigurator-core's own whole generation step (``trtspec.recipes.aic_step``, the same
   LOSO-fitted ``step_us`` on top) and their geometric mean, on the baselines both can price (``--no-aic`` skips);
4. intervals: how often the LOSO interval of each speedup covers the published one when the residual quantiles
   are themselves computed without that source (nested), the median relative width, and the wrong-side cases
   whose interval does not straddle 1; the same for the prior-AL predictions with the acceptance spread;
5. decisions: per published sweep over D at one batch, given each tested configuration's AL, the regret of the
   planner's pick, 1 - published(pick) / published(best); median and worst;
6. secondary: the old split (fit on ``split: train``, score ``split: heldout``).

``--fit`` rewrites ``recipes/engines/*.yaml`` with the figures fitted on every source (what ``trtspec plan``
ships; LOSO above is the honest estimate of how they transfer). ``--write-intervals`` rewrites
``recipes/validation/intervals.yaml`` (``trtspec.recipes.intervals``): per drafter class the 10th / 90th percentiles
of the LOSO log residuals of all sources, and per drafter the spread of published AL around the closest prior.

Targets (LOSO, speedup modes): median |error| <= 10%, p90 <= 25%, no case on the wrong side of 1 unless its
interval straddles 1; baselines median <= 15%; interval coverage 70-90% at median width <= half the prediction;
median regret <= 3%, no sweep above 10%.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys

MODES = ("speedup", "speedup-source-al", "batch-ratio", "baseline", "speedup-prior")
SPEEDUPS = ("speedup", "speedup-source-al")
GROUPS = (("engine", "engine"), ("drafter_class", "drafter class"), ("gpu_family", "GPU family"), ("quant", "quant"),
          ("batch_band", "batch band"))
TARGETS = {"median": 0.10, "p90": 0.25, "baseline_median": 0.15, "coverage": (0.70, 0.90), "width": 0.5,
           "median_regret": 0.03, "worst_regret": 0.10}


def _pct(v) -> str:
    return "n/a" if v is None else f"{v * 100:5.1f}%"


def _row(label: str, s: dict, r: dict | None = None, side: bool = True) -> str:
    text = (f"  {label[:34]:34} {s['cases']:4}  {_pct(s['median_abs_error']):>7} {_pct(s['p90_abs_error']):>7}"
            + (f" {s['wrong_side']:5}" if side else "      "))
    if r is not None:
        text += (f"   | {r['cases']:4}  {_pct(r['median_abs_error']):>7} {_pct(r['p90_abs_error']):>7}"
                 + (f" {r['wrong_side']:5}" if side else ""))
    return text


def _header(title: str) -> list[str]:
    return ["", title, f"  {'':34} {'n':>4}  {'median':>7} {'p90':>7} {'wrong':>5}   | {'n':>4}  {'median':>7} "
                       f"{'p90':>7} {'wrong':>5}",
            f"  {'':34} {'-- measured model, LOSO --':^32}   | {'-- pure roofline --':^32}"]


def _group_table(preds: list, roof: list, key: str) -> list[str]:
    from trtspec.recipes.validation import by_tag, summary

    def groups(ps):
        if key == "engine":
            out: dict = {}
            for p in ps:
                out.setdefault(p.item.engine, []).append(p)
            return dict(sorted(out.items()))
        return by_tag(ps, key)

    g, gr = groups(preds), groups(roof)
    return [_row(f"{key}={name}", summary(ps), summary(gr.get(name, []))) for name, ps in g.items()]


def baseline_comparison(items: list, measurements, use_aic: bool, progress=None) -> dict:
    """LOSO medians of the op-by-op baseline, aiconfigurator-core's whole step and their geometric mean."""
    from trtspec.recipes.validation import aic_baseline_items, combined_items, loso, summary

    ours = [it for it in items if it.mode == "baseline"]
    out = {"op-by-op (all)": summary(loso(ours))}
    if not use_aic:
        return out
    aic, skipped = aic_baseline_items(items, measurements, progress)
    ids = {it.id for it in aic}
    common = [it for it in ours if it.id in ids]
    out["op-by-op (both price)"] = summary(loso(common))
    out["aiconfigurator whole step"] = summary(loso(aic))
    out["geometric mean of the two"] = summary(loso(combined_items(common, aic)))
    out["_skipped"] = len(skipped)
    return out


def split_table(items: list) -> dict:
    """The secondary table: figures fitted on ``split: train`` only, scored on each split."""
    from trtspec.recipes.fidelity_fit import fit_items
    from trtspec.recipes.validation import in_sample, summary

    fitted = fit_items([it for it in items if it.split == "train"])
    preds = in_sample(items, fitted)
    return {split: {mode: summary([p for p in preds if p.item.split == split and
                                   (p.item.mode in SPEEDUPS if mode == "speedups" else p.item.mode == mode)])
                    for mode in ("speedups", "batch-ratio", "baseline")} for split in ("heldout", "train")}


def evaluate(measurements, *, use_aic: bool = True, progress=None) -> dict:
    from trtspec.recipes.validation import (acceptance_spread, interval_table, loso, nested_coverage, price_corpus,
                                            regret, roofline_predictions, summary)

    items, skipped = price_corpus(measurements, roofline=True, progress=progress)
    if progress:
        progress("leave-one-source-out fits")
    preds = loso(items)
    roof = roofline_predictions(items)
    spread = acceptance_spread(measurements)
    sp = [p for p in preds if p.item.mode in SPEEDUPS]
    res = {"corpus": {"cases": len(measurements), "sources": len({m.source for m in measurements}),
                      "scored": {m: sum(it.mode == m for it in items) for m in MODES}},
           "items": items, "preds": preds, "roof": roof, "skipped": skipped, "spread": spread,
           "modes": {m: (summary([p for p in preds if p.item.mode == m]), summary([p for p in roof if p.item.mode == m]))
                     for m in MODES},
           "speedups": (summary(sp), summary([p for p in roof if p.item.mode in SPEEDUPS])),
           "coverage": nested_coverage(preds), "prior_coverage": nested_coverage(preds, modes=("speedup-prior",),
                                                                                  spread=spread),
           "regret": regret(preds), "roof_regret": regret(roof), "intervals": interval_table(preds)}
    if progress:
        progress("baselines: aiconfigurator-core whole step" if use_aic else "baselines")
    res["baselines"] = baseline_comparison(items, measurements, use_aic)
    res["split"] = split_table(items)
    return res


def _regret_lines(res: dict) -> list[str]:
    rg, rr = res["regret"], res["roof_regret"]
    lines = ["", "Decisions: regret of the planner's pick on every published sweep over D (given each tested AL)"]
    for name, r in sorted(rg.items()):
        roof = rr.get(name, {})
        lines.append(f"  {name[:62]:62} best {r['best']:<20} pick {r['pick']:<20} regret {r['regret']:6.1%}"
                     f"   (roofline pick {roof.get('pick', '-')}, {roof.get('regret', float('nan')):.1%})")
    if rg:
        vals = [r["regret"] for r in rg.values()]
        lines.append(f"  {len(vals)} sweeps: median regret {statistics.median(vals):.1%}, worst {max(vals):.1%} "
                     f"(roofline: median {statistics.median(r['regret'] for r in rr.values()):.1%}, worst "
                     f"{max(r['regret'] for r in rr.values()):.1%})")
    return lines


def _coverage_line(name: str, c: dict) -> str:
    if not c["cases"]:
        return f"  {name}: no cases"
    return (f"  {name}: {c['covered']}/{c['cases']} covered ({_pct(c['coverage'])}), median width "
            f"{_pct(c['median_rel_width'])} of the prediction, {c['straddle']} straddle 1, "
            f"{c['wrong_side_outside']} on the wrong side of 1 outside a straddling interval")


def _targets(res: dict) -> list[str]:
    s, _ = res["speedups"]
    b = res["baselines"]["op-by-op (all)"]
    c = res["coverage"]
    rg = [r["regret"] for r in res["regret"].values()] or [0.0]
    checks = [("speedups median |error| <= 10%", s["median_abs_error"] <= TARGETS["median"]),
              ("speedups p90 |error| <= 25%", s["p90_abs_error"] <= TARGETS["p90"]),
              ("no wrong side of 1 outside a straddling interval", c["wrong_side_outside"] == 0),
              ("baselines median |error| <= 15%", b["median_abs_error"] <= TARGETS["baseline_median"]),
              ("interval coverage 70-90%", TARGETS["coverage"][0] <= (c["coverage"] or 0) <= TARGETS["coverage"][1]),
              ("median interval width <= half the prediction", (c["median_rel_width"] or 9) <= TARGETS["width"]),
              ("median regret <= 3%", statistics.median(rg) <= TARGETS["median_regret"]),
              ("no sweep regret above 10%", max(rg) <= TARGETS["worst_regret"])]
    return ["", "Targets (LOSO): " + "; ".join(f"{name}: {'met' if ok else 'MISSED'}" for name, ok in checks)]


def worst_lines(res: dict, n: int) -> list[str]:
    """The ``n`` speedups (both AL modes) of largest LOSO |error|, each with its nested interval, and every case on
    the wrong side of 1 whose interval does not straddle 1 (what drives the p90 and the wrong-side target)."""
    rows = res["coverage"]["rows"]
    ranked = sorted(rows, key=lambda r: -abs(r[0].error))

    def line(row) -> str:
        p, lo, hi, hit = row
        it = p.item
        flag = "WRONG-SIDE" if p.wrong_side and not lo < 1.0 < hi else ("wrong side" if p.wrong_side else "")
        return (f"  {p.error:+6.1%}  {it.id[:56]:56} {it.engine:6} B={it.batch:<4} D={it.draft_len:<2} "
                f"{it.tag('gpu')!s:12} published {it.published:5.2f} LOSO {p.predicted:5.2f} "
                f"[{lo:4.2f}, {hi:4.2f}]{'' if hit else ' miss'} {flag}")
    out = ["", f"Worst {n} speedups (LOSO |error|; nested interval; WRONG-SIDE: wrong side outside a straddling "
               "interval):"]
    out += [line(r) for r in ranked[:n]]
    wrong = [r for r in ranked if r[0].wrong_side and not r[1] < 1.0 < r[2]]
    out += ["", f"Wrong side of 1 outside a straddling interval ({len(wrong)}):"] + [line(r) for r in wrong]
    return out


def report(res: dict, cases: bool = False) -> list[str]:
    c = res["corpus"]
    lines = [f"Corpus: {c['cases']} cases from {c['sources']} sources; scored figures: "
             + ", ".join(f"{k} {v}" for k, v in c["scored"].items())]
    lines += _header("Leave-one-source-out, per scoring mode")
    for mode in MODES:
        m, r = res["modes"][mode]
        lines.append(_row(mode, m, r if r["cases"] else None, side=mode.startswith("speedup")))
    lines.append(_row("speedups (both AL modes)", *res["speedups"]))
    sp = [p for p in res["preds"] if p.item.mode in SPEEDUPS]
    rs = [p for p in res["roof"] if p.item.mode in SPEEDUPS]
    for key, title in GROUPS:
        lines += _header(f"Speedups (both AL modes) per {title}")
        lines += _group_table(sp, rs, key)
    lines += ["", "No-speculation baselines (LOSO; the engine's step_us refitted per fold on top of each):"]
    for name, s in res["baselines"].items():
        if not name.startswith("_"):
            lines.append(_row(name, s, side=False))
    if "_skipped" in res["baselines"]:
        lines.append(f"  ({res['baselines']['_skipped']} baselines aiconfigurator-core does not price: sparse / "
                     "compressed attention modules, 4-bit weight-only GEMMs, configs it does not ship)")
    lines += ["", "Intervals (70th percentile of |LOSO log residual| per interval class, both sides; nested per "
                    "source):",
              _coverage_line("speedups (measured AL)", res["coverage"]),
              _coverage_line("speedups at the closest prior's AL, widened by the AL spread", res["prior_coverage"])]
    for cls, e in res["intervals"].items():
        lo, hi = e["log_residual_q"]
        lines.append(f"  class {cls:15} {e['cases']:3} cases{' (pooled)' if e.get('pooled') and cls != 'all' else '':9}"
                     f" published / predicted in [{2.718281828 ** -hi:.3f}, {2.718281828 ** -lo:.3f}]")
    lines += _regret_lines(res)
    lines += ["", "Secondary: fit on split: train only (the old split)"]
    for split, modes in res["split"].items():
        for mode, s in modes.items():
            lines.append(_row(f"{split} {mode}", s, side=mode == "speedups"))
    lines += _targets(res)
    for mode, why in res["skipped"].items():
        reasons: dict = {}
        for text in why.values():
            reasons[text[:90]] = reasons.get(text[:90], 0) + 1
        lines.append(f"not scored ({mode}): " + "; ".join(f"{n} x {w}" for w, n in
                                                         sorted(reasons.items(), key=lambda x: -x[1])[:6]))
    if cases:
        roof = {(p.item.mode, p.item.id): p.predicted for p in res["roof"]}
        for p in sorted(res["preds"], key=lambda p: (p.item.mode, p.item.source, p.item.id)):
            it = p.item
            r = roof.get((it.mode, it.id))
            lines.append(f"  {it.mode:17} {it.id[:54]:54} {it.engine:6} B={it.batch:<4} D={it.draft_len:<2} "
                         f"published {it.published:9.3f}  LOSO {p.predicted:9.3f} ({p.error:+6.1%})  roofline "
                         + ("      n/a" if r is None else f"{r:9.3f}"))
    return lines


def write_intervals(res: dict, measurements) -> str:
    from trtspec.recipes.intervals import FORMAT, write_intervals as write
    from trtspec.recipes.validation import INTERVAL_LEVEL, INTERVAL_QUANTILES

    c = res["coverage"]
    doc = {"format": FORMAT, "generated": datetime.date.today().isoformat(),
           "corpus": {"cases": res["corpus"]["cases"], "sources": res["corpus"]["sources"],
                      "speedups_scored": len([p for p in res["preds"] if p.item.mode in SPEEDUPS])},
           "level": INTERVAL_LEVEL, "quantiles": list(INTERVAL_QUANTILES),
           "how": ("benchmarks/bench_fidelity.py --write-intervals: every corpus speedup with a published D and AL "
                   "predicted leave-one-source-out (engines' figures refitted without the case's source); "
                   f"cost_model = per interval class (drafter class, +moe for a target with routed experts) q = the "
                   f"{INTERVAL_LEVEL:.0%} percentile of |log(predicted / "
                   "published)|, stored as [-q, q] (a class with fewer than 8 cases takes every class's); "
                   "acceptance_spread = per drafter the 10th/90th percentiles of log(published AL / closest "
                   "published prior's AL at that D), the case's own source's priors left out. A speedup p gets "
                   "[p*exp(-q), p*exp(q)], widened by [exp(a10), exp(a90)] when its acceptance is a prior."),
           "validation": {"nested_coverage": round(c["coverage"] or 0.0, 4),
                          "median_rel_width": round(c["median_rel_width"] or 0.0, 4), "cases": c["cases"]},
           "cost_model": {k: {"cases": v["cases"], "pooled": bool(v.get("pooled")),
                              "log_residual_q": [round(x, 5) for x in v["log_residual_q"]]}
                          for k, v in res["intervals"].items()},
           "acceptance_spread": {k: {"cases": v["cases"], "log_ratio_q": [round(x, 5) for x in v["log_ratio_q"]]}
                                 for k, v in res["spread"].items()}}
    return str(write(doc))


def run_fit(measurements) -> dict:
    """Fit the engines' figures on every source and rewrite ``recipes/engines/*.yaml``."""
    from trtspec.recipes.engines import ENGINES, load_engine, save_engine_file
    from trtspec.recipes.fidelity_fit import SPEC_FITTED, fit_items
    from trtspec.recipes.validation import price_corpus

    items, _ = price_corpus(measurements)
    fitted = fit_items(items)
    today = datetime.date.today().isoformat()
    n_src = len({it.source for it in items})
    for engine in ENGINES:
        f = fitted[engine]
        why = {k: (f"fitted {today} by benchmarks/bench_fidelity.py --fit, one figure for every engine: "
                   f"{len(f['cases'])} speedups and batch ratios of recipes/measurements ({f['own_cases']} of them "
                   f"{engine}'s; {n_src} sources; robust least squares on the source-weighted log error; kernels from "
                   "perf-db; each engine's step_us held; how it transfers to unseen sources is what the "
                   "leave-one-source-out table reports)") for k in SPEC_FITTED}
        why["verify_split"] += ("; 0 = packed query rows (one KV pass per tile), 1 = every verified token a decode "
                                "request of its own")
        steps = "every engine's small-batch baselines, pooled" if f["step_pooled"] else \
            f"{engine}'s own small-batch baselines"
        why["step_us"] = (f"fitted {today} by benchmarks/bench_fidelity.py --fit on {steps} (published "
                          f"no-speculation tok/s at batch 1; {len(f['baselines'])} of them {engine}'s own; robust "
                          "least squares on the source-weighted log step time, kernels from perf-db)")
        profile = load_engine(engine).with_params(**f["params"])
        save_engine_file(profile, profile.path, why)
    return fitted


def _to_json(res: dict) -> dict:
    def preds(ps):
        return [{"id": p.item.id, "mode": p.item.mode, "source": p.item.source, "engine": p.item.engine,
                 "batch": p.item.batch, "draft_len": p.item.draft_len, "published": p.item.published,
                 "predicted": p.predicted, "roofline": p.item.roofline, "tags": dict(p.item.tags)} for p in ps]
    cov = {k: {x: y for x, y in res[k].items() if x != "rows"} for k in ("coverage", "prior_coverage")}
    return {"corpus": res["corpus"], "modes": res["modes"], "speedups": res["speedups"], "baselines": res["baselines"],
            "intervals": res["intervals"], "acceptance_spread": res["spread"], **cov, "regret": res["regret"],
            "split": res["split"], "predictions": preds(res["preds"])}


def main(argv=None) -> int:
    from rich.console import Console

    from trtspec.recipes.measurements import load_measurements

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="refit the engines' figures on every source and rewrite "
                                                       "recipes/engines/*.yaml first")
    ap.add_argument("--write-intervals", action="store_true", help="rewrite recipes/validation/intervals.yaml")
    ap.add_argument("--no-aic", action="store_true", help="skip aiconfigurator-core's whole-step baseline")
    ap.add_argument("--cases", action="store_true", help="print every scored figure")
    ap.add_argument("--worst", type=int, default=0, metavar="N",
                    help="list the N speedups of largest LOSO |error| and every wrong-side case")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    ms = load_measurements()
    with console.status("pricing the corpus") as status:
        def progress(label):
            status.update(f"pricing: {label}")
        fitted = None
        if args.fit:
            progress("fitting the engines on every source")
            fitted = run_fit(ms)
        res = evaluate(ms, use_aic=not args.no_aic, progress=progress)
    if args.write_intervals:
        console.print(f"intervals written: {write_intervals(res, ms)}")
    if args.json:
        doc = _to_json(res)
        doc["fitted"] = fitted
        print(json.dumps(doc, indent=2, default=str))
        return 0
    if fitted:
        for engine, f in fitted.items():
            print(f"fitted {engine}: " + ", ".join(f"{k} = {v:.3g}" for k, v in f["params"].items())
                  + f" ({f['own_cases']} of the {len(f['cases'])} speculative figures its own)")
    print("\n".join(report(res, args.cases) + (worst_lines(res, args.worst) if args.worst else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
