"""Bench outputs: ``acceptance.json`` (the profile ``trtspec plan --acceptance`` reads),
``bench.json`` (everything, for tools), ``report.md`` and PNG plots (AL per category with its
confidence interval, the a_k curve, the AL histogram). Files are written to a temp name and renamed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.bench.metrics import AcceptanceProfile, Throughput

ACCEPTANCE_FILE = "acceptance.json"
RESULT_FILE = "bench.json"
REPORT_FILE = "report.md"
PLOT_AL = "al_per_category.png"
PLOT_AK = "ak_curve.png"
PLOT_HIST = "al_histogram.png"


def result_dict(profile: AcceptanceProfile, tput: Throughput | None, meta: dict[str, Any]) -> dict[str, Any]:
    """All figures of one bench run as a JSON-able dict (the ``--json`` output)."""
    return {
        "meta": meta,
        "acceptance": profile.to_dict(),
        "overall": profile.overall.to_dict(),
        "per_category": {c: s.to_dict() for c, s in profile.per_category.items()},
        "throughput": None if tput is None else {
            "output_tokens": tput.output_tokens, "wall_s": tput.wall_s, "tokens_per_s": tput.tokens_per_s,
            "per_user_tokens_per_s": tput.per_user_tokens_per_s},
    }


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _fmt_ci(s) -> str:
    return f"[{s.ci.low:.3f}, {s.ci.high:.3f}]" if s.ci is not None else "n/a"


def markdown(profile: AcceptanceProfile, tput: Throughput | None, meta: dict[str, Any], plots: list[str]) -> str:
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
                  meta: dict[str, Any], *, plots: bool = True) -> dict[str, Path]:
    """Write acceptance.json, bench.json, report.md and (``plots``) the PNGs into ``out_dir``."""
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
    result = result_dict(profile, tput, meta)
    result["files"] = {k: str(v) for k, v in paths.items()}
    _atomic_text(out / RESULT_FILE, json.dumps(result, indent=2) + "\n")
    paths["result"] = out / RESULT_FILE
    _atomic_text(out / REPORT_FILE, markdown(profile, tput, meta, names))
    paths["report"] = out / REPORT_FILE
    return paths
