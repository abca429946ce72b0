"""Bench outputs: ``acceptance.json`` (the profile ``trtspec plan --acceptance`` reads),
``bench.json`` (everything, for tools), ``report.md`` and PNG plots (AL per category with its
confidence interval, the a_k curve, the AL histogram). Files are written to a temp name and renamed.

A quantized target benched next to its unquantized source (same prompts, draft and settings) adds
a ``comparison`` (:func:`compare_targets`): AL per category of both and their difference with a
paired bootstrap interval over requests.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.bench.metrics import AcceptanceProfile, RequestRecord, Throughput

ACCEPTANCE_FILE = "acceptance.json"
RESULT_FILE = "bench.json"
REPORT_FILE = "report.md"
PLOT_AL = "al_per_category.png"
PLOT_AK = "ak_curve.png"
PLOT_HIST = "al_histogram.png"


def paired_delta(quant: list[RequestRecord], base: list[RequestRecord], *, level: float = 0.95,
                 resamples: int = 2000, seed: int = 0) -> tuple[float, float, int] | None:
    """Percentile-bootstrap interval of ``mean AL(quant) - mean AL(base)`` over the requests both
    runs answered with drafts (one resample draws the same requests from both): ``(low, high, n)``,
    None with fewer than 2 such requests. Mean AL is the ratio estimator ``1 + sum a / sum n``."""
    import numpy as np

    b = {r.question_id: r for r in base if r.num_drafts > 0}
    pairs = [(q, b[q.question_id]) for q in quant if q.num_drafts > 0 and q.question_id in b]
    if len(pairs) < 2:
        return None
    a_q, n_q, a_b, n_b = (np.array([getattr(p[i], f) for p in pairs], dtype=np.float64)
                          for i, f in ((0, "accepted_tokens"), (0, "num_drafts"), (1, "accepted_tokens"), (1, "num_drafts")))
    idx = np.random.default_rng(seed).integers(0, len(pairs), size=(resamples, len(pairs)))
    boot = a_q[idx].sum(1) / n_q[idx].sum(1) - a_b[idx].sum(1) / n_b[idx].sum(1)
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi), len(pairs)


def _side(s) -> dict[str, Any]:
    return {"mean_al": s.mean_al, "num_requests": s.num_requests, "num_steps": s.num_steps,
            "ci": None if s.ci is None else [s.ci.low, s.ci.high]}


def compare_targets(quant: AcceptanceProfile, quant_records: list[RequestRecord], base: AcceptanceProfile,
                    base_records: list[RequestRecord], *, quant_name: str, base_name: str, quant_format: str,
                    seed: int = 0) -> dict[str, Any]:
    """The quantized-versus-unquantized acceptance table: overall and per category, each side's mean
    AL (with its CI), ``delta`` = quantized - unquantized and its paired 95 % bootstrap ``delta_ci``."""
    def row(qs, bs, qr, br):
        d = paired_delta(qr, br, seed=seed)
        return {"quantized": _side(qs), "unquantized": _side(bs), "delta": qs.mean_al - bs.mean_al,
                "delta_ci": None if d is None else [d[0], d[1]], "paired_requests": 0 if d is None else d[2]}

    cats = {}
    for c, qs in quant.per_category.items():
        if c in base.per_category:
            cats[c] = row(qs, base.per_category[c], [r for r in quant_records if r.category == c],
                          [r for r in base_records if r.category == c])
    return {"quantized_target": quant_name, "unquantized_target": base_name, "quant": quant_format,
            "draft_len": quant.draft_len, "ci": "paired bootstrap over requests (2000 resamples, 95 %)",
            "overall": row(quant.overall, base.overall, quant_records, base_records), "per_category": cats}


def verdict(comparison: dict[str, Any]) -> str:
    """One sentence on the overall difference: whether its interval excludes zero."""
    o = comparison["overall"]
    ci = o["delta_ci"]
    change = f"mean AL {o['quantized']['mean_al']:.3f} vs {o['unquantized']['mean_al']:.3f} unquantized (delta {o['delta']:+.3f}"
    if ci is None:
        return f"{comparison['quant']} target: {change}; too few paired requests for an interval)"
    span = f", 95 % CI [{ci[0]:+.3f}, {ci[1]:+.3f}])"
    if ci[0] <= 0 <= ci[1]:
        return f"{comparison['quant']} target: {change}{span}: no significant change in acceptance"
    return (f"{comparison['quant']} target: {change}{span}: acceptance is significantly "
            f"{'lower' if ci[1] < 0 else 'higher'}")


def _comparison_md(c: dict[str, Any]) -> list[str]:
    def ci(x):
        return "n/a" if x is None else f"[{x[0]:.3f}, {x[1]:.3f}]"

    lines = ["", "## Quantized vs unquantized target", "",
             f"`{c['quantized_target']}` ({c['quant']}) against `{c['unquantized_target']}`: same prompts, draft and "
             f"settings, D = {c['draft_len']}. Delta = quantized - unquantized; its interval is a {c['ci']}.", "",
             verdict(c) + ".", "",
             "| category | requests | AL quantized | 95 % CI | AL unquantized | 95 % CI | delta | delta 95 % CI |",
             "|---|---:|---:|---|---:|---|---:|---|"]
    for name, r in [("**overall**", c["overall"])] + list(c["per_category"].items()):
        q, b = r["quantized"], r["unquantized"]
        lines.append(f"| {name} | {q['num_requests']} | {q['mean_al']:.3f} | {ci(q['ci'])} | {b['mean_al']:.3f} | "
                     f"{ci(b['ci'])} | {r['delta']:+.3f} | {ci(r['delta_ci'])} |")
    return lines


def result_dict(profile: AcceptanceProfile, tput: Throughput | None, meta: dict[str, Any],
                comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    """All figures of one bench run as a JSON-able dict (the ``--json`` output)."""
    return {
        "meta": meta,
        "acceptance": profile.to_dict(),
        "overall": profile.overall.to_dict(),
        "per_category": {c: s.to_dict() for c, s in profile.per_category.items()},
        "throughput": None if tput is None else {
            "output_tokens": tput.output_tokens, "wall_s": tput.wall_s, "tokens_per_s": tput.tokens_per_s,
            "per_user_tokens_per_s": tput.per_user_tokens_per_s},
        **({"comparison": comparison} if comparison is not None else {}),
    }


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _fmt_ci(s) -> str:
    return f"[{s.ci.low:.3f}, {s.ci.high:.3f}]" if s.ci is not None else "n/a"


def markdown(profile: AcceptanceProfile, tput: Throughput | None, meta: dict[str, Any], plots: list[str],
             comparison: dict[str, Any] | None = None) -> str:
    """The markdown report text."""
    o = profile.overall
    lines = ["# trtspec bench", ""]
    lines += [f"- {k}: `{v}`" for k, v in meta.items()]
    lines += ["", "## Acceptance (AL includes the bonus token)", ""]
    ci_note = o.ci.method if o.ci is not None else "no interval (fewer than 2 requests or aggregate counters)"
    lines += [f"Overall mean AL **{o.mean_al:.3f}** (95 % CI {_fmt_ci(o)}, {ci_note}) over {o.num_steps} steps "
              f"of {o.num_requests} requests, draft length D = {profile.draft_len}.", ""]
    if o.rates_fitted:
        lines += ["Per-position rates were not reported by this runner: a_k below is the constant rate fitted "
                  "to mean AL.", ""]
    lines += ["| category | requests | steps | mean AL | 95 % CI |", "|---|---:|---:|---:|---|"]
    for c, s in profile.per_category.items():
        lines.append(f"| {c} | {s.num_requests} | {s.num_steps} | {s.mean_al:.3f} | {_fmt_ci(s)} |")
    lines += ["", "| k | a_k (conditional) | P(accepted >= k) (joint) |", "|---:|---:|---:|"]
    for k, (a, j) in enumerate(zip(o.rates, o.joint), start=1):
        lines.append(f"| {k} | {a:.3f} | {j:.3f} |")
    if o.histogram:
        lines += ["", "AL histogram (steps with AL = 1 .. D+1): " + ", ".join(str(h) for h in o.histogram)]
    if comparison is not None:
        lines += _comparison_md(comparison)
    if tput is not None:
        lines += ["", "## Throughput", "",
                  f"{tput.output_tokens} output tokens in {tput.wall_s:.2f} s: **{tput.tokens_per_s:.1f} tokens/s**; "
                  f"per user {tput.per_user_tokens_per_s:.1f} tokens/s (mean over requests)."]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", f"Source: {profile.source}", ""]
    return "\n".join(lines)


def plot_al_per_category(profile: AcceptanceProfile, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = list(profile.per_category)
    means = [profile.per_category[c].mean_al for c in cats]
    err = [[m - (s.ci.low if s.ci else m) for m, s in zip(means, profile.per_category.values())],
           [(s.ci.high if s.ci else m) - m for m, s in zip(means, profile.per_category.values())]]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(cats) + 2), 4))
    ax.bar(cats, means, yerr=err, capsize=3, color="#76b900")
    ax.axhline(profile.overall.mean_al, color="k", ls="--", lw=1, label=f"overall {profile.overall.mean_al:.2f}")
    ax.set_ylabel("mean AL (tokens / target step, incl. bonus)")
    ax.set_ylim(1, profile.draft_len + 1.15)
    ax.set_title(f"Acceptance length per category (D = {profile.draft_len}, 95 % CI)")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    return _save(fig, path)


def plot_ak_curve(profile: AcceptanceProfile, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = list(range(1, profile.draft_len + 1))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ks, profile.overall.rates, "o-", label="a_k (conditional)", color="#76b900")
    ax.plot(ks, profile.overall.joint, "s--", label="P(accepted >= k) (joint)", color="#555555")
    ax.set_xlabel("draft position k")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(ks)
    ax.set_title("Per-position acceptance" + (" (fitted constant)" if profile.overall.rates_fitted else ""))
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_histogram(profile: AcceptanceProfile, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = profile.overall.histogram
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(list(range(1, len(hist) + 1)), hist, color="#76b900")
    ax.set_xlabel("AL (tokens per target step)")
    ax.set_ylabel("steps")
    ax.set_title("AL histogram")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def write_outputs(out_dir: str | Path, profile: AcceptanceProfile, tput: Throughput | None,
                  meta: dict[str, Any], *, plots: bool = True, comparison: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write acceptance.json, bench.json, report.md and (``plots``) the PNGs into ``out_dir``
    (``comparison``: a :func:`compare_targets` table, added to bench.json and report.md)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"acceptance": profile.save(out / ACCEPTANCE_FILE)}
    names: list[str] = []
    if plots:
        paths["plot_al"] = plot_al_per_category(profile, out / PLOT_AL)
        paths["plot_ak"] = plot_ak_curve(profile, out / PLOT_AK)
        names = [PLOT_AL, PLOT_AK]
        if profile.overall.histogram:
            paths["plot_hist"] = plot_histogram(profile, out / PLOT_HIST)
            names.append(PLOT_HIST)
    result = result_dict(profile, tput, meta, comparison)
    result["files"] = {k: str(v) for k, v in paths.items()}
    _atomic_text(out / RESULT_FILE, json.dumps(result, indent=2) + "\n")
    paths["result"] = out / RESULT_FILE
    _atomic_text(out / REPORT_FILE, markdown(profile, tput, meta, names, comparison))
    paths["report"] = out / REPORT_FILE
    return paths
