"""Planner fidelity against the published corpus: the measured-data model beside the pure roofline, held-out and train.

    python benchmarks/bench_fidelity.py [--fit] [--cases] [--json]

For every corpus case (``recipes/measurements/*.yaml``) that publishes a draft length and an acceptance length, the
planner predicts the published speedup from the published AL (``trtspec.recipes.fidelity``); the rest are counted
as not scored, with the reason. Printed side by side, for the held-out split and the training split: median and
90th percentile of |predicted / published - 1|, cases on the wrong side of 1, and per published sweep over D the
distance between the published best D and the predicted best D -- for the measured-data model (``--pricing
perf-db`` with the engines' fitted overheads) and for the pure roofline (``--pricing roofline``: the analytic model
with the GPU files' fixed costs). A sweep's "tie-aware" distance counts every D whose published speedup is within
``TIE`` (1%) of the sweep's best as a best D (sources round and scatter by about that much).

``--fit`` first refits the engines' overheads on the train split only and rewrites ``recipes/engines/*.yaml``.
Targets: held-out median |error| <= 10%, no held-out case on the wrong side of 1, best D within 1 of every sweep.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

TIE = 0.01
TARGET_MEDIAN = 0.10


def _tie_distance(scores, sweep: str) -> int:
    cases = [s for s in scores if s.sweep == sweep]
    top = max(c.published for c in cases)
    best_pub = {c.draft_len for c in cases if c.published >= top * (1 - TIE)}
    pred = max(cases, key=lambda c: c.predicted).draft_len
    return min(abs(pred - d) for d in best_pub)


def batch_trends(measurements, pricing: str) -> list[dict]:
    """Per pair of one sweep at two batch sizes (same D): published and predicted speedup(B) / speedup(B_ref)."""
    from trtspec.recipes.errors import RecipeError
    from trtspec.recipes.fidelity import batch_pairs, predict, setup_case

    out = []
    for ref, case in batch_pairs(measurements):
        try:
            pred = predict(setup_case(case, pricing=pricing, need_al=False)) / \
                predict(setup_case(ref, pricing=pricing, need_al=False))
        except RecipeError:
            continue
        out.append({"split": case.split, "pair": f"{case.id} / B={ref.batch}", "published": case.speedup / ref.speedup,
                    "predicted": pred})
    return out


def evaluate(measurements, pricing: str) -> dict:
    from trtspec.recipes.fidelity import score_cases, summary, sweep_best_d

    scores, skipped = score_cases(measurements, pricing=pricing)
    out = {"skipped": skipped, "scores": scores, "trends": batch_trends(measurements, pricing)}
    for split in ("heldout", "train"):
        part = [s for s in scores if s.split == split]
        sweeps = sweep_best_d(part)
        for name, row in sweeps.items():
            row["tie_distance"] = _tie_distance(part, name)
        out[split] = {**summary(part), "sweeps": sweeps}
    return out


def run_fit(measurements) -> dict:
    from trtspec.recipes.engines import ENGINES, load_engine, save_engine_file
    from trtspec.recipes.fidelity import FITTED, fit

    fitted = fit(measurements)
    today = datetime.date.today().isoformat()
    for engine in ENGINES:
        f = fitted[engine]
        how = (f"pooled over every engine's train cases ({engine} has fewer than the minimum of its own)"
               if f["pooled"] else f"on {engine}'s own train cases")
        why = {k: (f"fitted {today} by benchmarks/bench_fidelity.py --fit {how}: {len(f['cases'])} speedups and "
                   f"batch ratios of recipes/measurements with split: train (least squares on the log error; "
                   f"kernels from perf-db; step_us held)") for k in FITTED[1:]}
        steps = "every engine's batch-1 train baselines, pooled" if f["step_pooled"] else \
            f"{engine}'s own batch-1 train baselines"
        why["step_us"] = (f"fitted {today} by benchmarks/bench_fidelity.py --fit on {steps} (published "
                          f"no-speculation tok/s of one request; {len(f['baselines'])} of them {engine}'s own; "
                          "least squares on the log step time, kernels from perf-db)")
        profile = load_engine(engine).with_params(**f["params"])
        save_engine_file(profile, profile.path, why)
    return fitted


def _fmt(v, pct=True):
    if v is None:
        return "n/a"
    return f"{v * 100:5.1f}%" if pct else str(v)


def report(measured: dict, roofline: dict) -> list[str]:
    cols = [("measured", "heldout"), ("measured", "train"), ("roofline", "heldout"), ("roofline", "train")]
    res = {"measured": measured, "roofline": roofline}
    lines = [f"{'':28}" + "".join(f"{m + ' ' + s:>18}" for m, s in cols)]
    for key, label, pct in (("cases", "cases scored", False), ("median_abs_error", "median |error|", True),
                            ("p90_abs_error", "p90 |error|", True), ("wrong_side", "wrong side of 1", False)):
        lines.append(f"{label:28}" + "".join(f"{_fmt(res[m][s][key], pct):>18}" for m, s in cols))
    lines.append("best-D distance per published sweep (strict / tie-aware within 1%):")
    for split in ("heldout", "train"):
        for name, row in measured[split]["sweeps"].items():
            r = roofline[split]["sweeps"].get(name, {})
            lines.append(f"  [{split:7}] {name[:60]:60} published D={row['published_best_d']}: measured D="
                         f"{row['predicted_best_d']} ({row['distance']}/{row['tie_distance']}), roofline D="
                         f"{r.get('predicted_best_d', '-')} ({r.get('distance', '-')}/{r.get('tie_distance', '-')})")
    lines.append("batch trend, AL-free (speedup(B) / speedup(smallest B) of one sweep at one D):")
    roof = {t["pair"]: t["predicted"] for t in roofline["trends"]}
    for t in measured["trends"]:
        lines.append(f"  [{t['split']:7}] {t['pair'][:60]:60} published {t['published']:.3f}: measured "
                     f"{t['predicted']:.3f}, roofline {roof.get(t['pair'], float('nan')):.3f}")
    ho = measured["heldout"]
    sweeps = [r for s in ("heldout", "train") for r in measured[s]["sweeps"].values()]
    lines.append(f"targets (measured model): held-out median |error| <= 10%: "
                 f"{'met' if ho['median_abs_error'] is not None and ho['median_abs_error'] <= TARGET_MEDIAN else 'MISSED'}"
                 f"; no held-out case on the wrong side of 1: {'met' if ho['wrong_side'] == 0 else 'MISSED'}"
                 f"; best D within 1 of every sweep: strict {'met' if all(r['distance'] <= 1 for r in sweeps) else 'MISSED'}"
                 f", tie-aware {'met' if all(r['tie_distance'] <= 1 for r in sweeps) else 'MISSED'}")
    reasons: dict = {}
    for why in measured["skipped"].values():
        reasons[why] = reasons.get(why, 0) + 1
    lines.append("not scored: " + "; ".join(f"{n} x {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])))
    return lines


def main(argv=None) -> int:
    from trtspec.recipes.measurements import load_measurements

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="refit the engines' overheads on the train split first")
    ap.add_argument("--cases", action="store_true", help="print every scored case")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ms = load_measurements()
    fitted = run_fit(ms) if args.fit else None
    measured, roofline = evaluate(ms, "perf-db"), evaluate(ms, "roofline")
    if args.json:
        strip = lambda r: {k: v for k, v in r.items() if k != "scores"}  # noqa: E731
        doc = {"measured": strip(measured), "roofline": strip(roofline), "fitted": fitted,
               "cases": [{"id": a.id, "split": a.split, "published": a.published, "measured": a.predicted,
                          "roofline": b.predicted} for a, b in zip(measured["scores"], roofline["scores"])]}
        print(json.dumps(doc, indent=2, default=str))
        return 0
    if fitted:
        for engine, f in fitted.items():
            print(f"fitted {engine}: " + ", ".join(f"{k} = {v:.1f}" for k, v in f["params"].items())
                  + (" (pooled)" if f["pooled"] else f" ({len(f['cases'])} own train cases)"))
    print("\n".join(report(measured, roofline)))
    if args.cases:
        roof = {s.id: s.predicted for s in roofline["scores"]}
        for s in measured["scores"]:
            print(f"  {s.split:7} {s.id:52} D={s.draft_len:<2} published {s.published:5.2f}  measured {s.predicted:5.2f}"
                  f" ({s.error:+6.1%})  roofline {roof.get(s.id, float('nan')):5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
