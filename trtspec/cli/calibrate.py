"""``trtspec calibrate``: fit a deployment's engine figures to a few points measured on it."""
from __future__ import annotations

import json
import sys

import click

from trtspec.recipes.engines import ENGINES
from trtspec.recipes.optimizer import PlanRequest
from trtspec.recipes.user_calibration import COLUMN_HELP, FORMAT, INPUT_FORMAT, SETUP_FIELDS
from trtspec.recipes.user_fit import FitSettings

DEFAULT_OUT = "calibration.yaml"
_DEF = {f: PlanRequest.__dataclass_fields__[f].default for f in ("tp", "ep", "quant", "engine", "context")}
_EXAMPLE_YAML = f"""\
  format: {INPUT_FORMAT}   # optional
  setup: {{model: llama-3.1-8b, gpu: h100, engine: vllm, drafter: eagle3, context: 2048}}
  points:
    - {{batch: 1, draft_len: 0, al: 1, tokens_per_s: 150}}
    - {{batch: 1, draft_len: 3, al: 2.9, tokens_per_s: 330}}
    - {{batch: 32, draft_len: 0, al: 1, tokens_per_s: 3600}}
    - {{batch: 32, draft_len: 3, al: 2.9, tokens_per_s: 5600}}"""
_EXAMPLE_CSV = """\
  batch,draft_len,al,tokens_per_s
  1,0,1,150
  1,3,2.9,330"""


def _help() -> str:
    cols = "\n".join(f"  {k:<13}{v}" for k, v in COLUMN_HELP.items())
    return "\n\n".join([
        "Fit this deployment's engine figures (kernel scale, per-step fixed cost, speculative and draft fixed "
        "costs, verification rule) to points measured on it, regularised toward the corpus fit, into a calibration "
        "file for `trtspec plan --calibration FILE` and `trtspec build --calibration FILE`.",
        "INPUTS: YAML/JSON files of a setup and points, CSV files of points (the setup from the options below), "
        "and/or bench.json reports of `trtspec bench --server URL` or `--triton` (one point each: its --concurrency, "
        "--draft-len, measured AL and tokens/s). Every row is checked before anything is fitted; a bad one stops "
        "with one line naming the file, the row and the field.",
        f"\b\nPoint columns (CSV header, YAML keys); tokens_per_s or speedup on each row:\n{cols}",
        f"\b\nSetup fields (YAML 'setup:', else the options): {', '.join(SETUP_FIELDS)};\n"
        "model, gpu and drafter are required.",
        f"\b\nExample points.yaml (trtspec calibrate points.yaml):\n{_EXAMPLE_YAML}",
        "\b\nExample points.csv (trtspec calibrate points.csv --model llama-3.1-8b --gpu h100\n"
        f"  --engine vllm --drafter eagle3):\n{_EXAMPLE_CSV}",
        f"The calibration file ({FORMAT}) holds the setup it is valid for, every figure with its standard deviation "
        "and corpus prior, the points with their predictions before and after, and a fit summary; plan and build "
        "refuse it for another model, GPU, engine, TP, EP, quant or drafter."])


def _setup_options(f):
    opts = [
        click.option("--model", default=None, help="Built-in model name, HF model dir or config file [default: "
                     "the file's setup]."),
        click.option("--gpu", default=None, help="GPU from recipes/gpus [default: the file's setup]."),
        click.option("--drafter", default=None, help="draft_model|eagle3|mtp|dflash|dspark|ngram|sa [default: the "
                     "file's setup, or the bench.json's]."),
        click.option("--tp", type=int, default=None, help=f"Tensor-parallel GPUs [default: the file's setup, else "
                     f"{_DEF['tp']}]."),
        click.option("--ep", type=int, default=None, help=f"Expert-parallel GPUs [default: the file's setup, else "
                     f"{_DEF['ep']}]."),
        click.option("--quant", default=None, help="Weight quantization as in `trtspec plan` [default: the file's "
                     f"setup, else {_DEF['quant']}]."),
        click.option("--engine", type=click.Choice(ENGINES), default=None,
                     help=f"Serving engine measured [default: the file's setup or bench.json's, else "
                          f"{_DEF['engine']}]."),
        click.option("--draft-model", default=None, help="Draft model (name|dir) for --drafter draft_model."),
        click.option("--context", type=int, default=None, help="KV-cache tokens per request, prompt + half the "
                     f"output [default: the file's setup, else {_DEF['context']}]; a point's own context column "
                     "wins."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command("calibrate", help=_help())
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@_setup_options
@click.option("--noise", type=float, default=FitSettings.noise_sd, show_default=True,
              help="Measurement error of one point (relative, log space): smaller trusts the points more against "
                   "the corpus prior.")
@click.option("--out", type=click.Path(dir_okay=False), default=DEFAULT_OUT, show_default=True,
              help="Calibration file to write (.yaml, or .json).")
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="PNG: measured vs predicted, before and after calibration.")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration file's content as JSON on stdout.")
def calibrate(inputs, model, gpu, drafter, tp, ep, quant, engine, draft_model, context, noise, out, plot, as_json):
    from trtspec.recipes.errors import RecipeError
    from trtspec.recipes.user_calibration import read_inputs
    from trtspec.recipes.user_fit import calibrate as run_fit

    setup = dict(model=model, gpu=gpu, drafter=drafter, tp=tp, ep=ep, quant=quant, engine=engine,
                 draft_model=draft_model, context=context)
    try:
        settings = FitSettings(noise_sd=noise)
        deployment = read_inputs(inputs, setup)
    except RecipeError as exc:
        raise click.ClickException(str(exc)) from None
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(f"fitting {len(deployment.points)} points"):
        try:
            cal = run_fit(deployment, settings)
        except RecipeError as exc:
            raise click.ClickException(str(exc)) from None
    cal.save(out)
    if plot:
        save_plot(cal, plot)
    if as_json:
        json.dump({**cal.to_doc(), "path": cal.path}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    render(cal, Console(width=None if sys.stdout.isatty() else 160))
    console.print(f"[green]wrote[/] {cal.path}" + (f", {plot}" if plot else "") +
                  f"  (use: trtspec plan --calibration {cal.path} ...)", highlight=False)


def render(cal, console) -> None:
    """The per-point table (measured, before, after) and the figures (corpus prior, fitted +- sd)."""
    from rich.table import Table

    s = cal.setup
    fig = {p.get("tokens_per_s") is not None for p in cal.points}
    t = Table(title=f"{s.model} on {s.gpu} x{s.tp} ({s.quant}, {s.engine}, {s.drafter}): measured vs predicted")
    for col in ("batch", "D", "AL", "figure", "measured", "before", "error", "after", "+-", "error"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for p in cal.points:
        name = "tok/s" if "tokens_per_s" in p else "speedup"
        value = p.get("tokens_per_s", p.get("speedup"))
        t.add_row(str(p["batch"]), str(p["draft_len"]), f"{p['al']:.2f}", name, _fmt(value),
                  _fmt(p["predicted_before"]), f"{p['error_before']:+.1%}", _fmt(p["predicted_after"]),
                  f"{p['predicted_after_rel_sd']:.1%}", f"{p['error_after']:+.1%}")
    console.print(t)
    pt = Table(title="engine figures: corpus fit -> this deployment")
    for col in ("figure", "corpus fit", "fitted", "+- sd", "prior width"):
        pt.add_column(col, justify="left" if col == "figure" else "right")
    for name, p in cal.parameters.items():
        width = "held" if not p["fitted"] else (f"x e^{p['prior_sd']:g}" if p["space"] == "log" else
                                                f"+- {p['prior_sd']:g}")
        pt.add_row(name, _fmt(p["prior"]), _fmt(p["value"]), _fmt(p["sd"]) if p["fitted"] else "", width)
    console.print(pt)
    f = cal.fit
    console.print(f"{f['points']} points{' (tok/s and speedups)' if len(fig) > 1 else ''}, {len(f['fitted'])} "
                  f"figures fitted: median |error| {f['median_abs_error_before']:.1%} -> "
                  f"{f['median_abs_error_after']:.1%} (max after {f['max_abs_error_after']:.1%}); "
                  f"{'converged' if f['converged'] else 'NOT converged: ' + f['message']}", highlight=False)


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def save_plot(cal, path) -> None:
    """Per point, predicted / measured - 1 before (the corpus fit) and after calibration (with its sd)."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = cal.points
    xs = list(range(len(pts)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(pts) + 3), 4.5))
    ax.axhline(0.0, color="k", lw=0.8)
    ax.scatter(xs, [100 * p["error_before"] for p in pts], marker="x", color="#888888", label="corpus fit (before)")
    ax.errorbar(xs, [100 * p["error_after"] for p in pts], yerr=[100 * p["predicted_after_rel_sd"] for p in pts],
                fmt="o", color="#76b900", capsize=3, label="calibrated (after), +- 1 sd")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"B={p['batch']} D={p['draft_len']}" + ("" if "tokens_per_s" in p else " (speedup)")
                        for p in pts], rotation=30, ha="right")
    ax.set_ylabel("predicted / measured - 1 (%)")
    s = cal.setup
    ax.set_title(f"{s.model} on {s.gpu} x{s.tp}, {s.engine}, {s.drafter}: {len(pts)} points")
    ax.legend()
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
