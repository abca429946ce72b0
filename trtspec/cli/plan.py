"""``trtspec plan``: predict the best draft length (and tree) per batch size before running anything."""
from __future__ import annotations

import json
import sys

import click

from trtspec.cli.parallel import parallel_options
from trtspec.recipes.engines import ENGINES
from trtspec.recipes.optimizer import OBJECTIVES, PlanRequest
from trtspec.recipes.pricing import PRICINGS

_DEF = {f: PlanRequest.__dataclass_fields__[f].default
        for f in ("quant", "context", "max_draft_len", "objective", "engine", "pricing")}


def _batches(text):
    if not text:
        return None
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"expected comma-separated integers, got {text!r}") from exc
    if not out or min(out) < 1:
        raise click.BadParameter("batch sizes must be >= 1")
    return out


def _contexts(text) -> list[int]:
    """``4096`` or ``1k,8k,32k`` (k = 1024 tokens) -> token counts."""
    out = []
    for item in str(text).split(","):
        item = item.strip().lower()
        if not item:
            continue
        try:
            out.append(int(float(item[:-1]) * 1024) if item.endswith("k") else int(item))
        except ValueError as exc:
            raise click.BadParameter(f"expected token counts like 4096 or 1k,8k,32k, got {text!r}") from exc
    if not out or min(out) < 0 or len(set(out)) != len(out):
        raise click.BadParameter(f"expected distinct token counts >= 0 like 4096 or 1k,8k,32k, got {text!r}")
    return out


def priced_by(recipe) -> str:
    """One line per step part: which source priced each op class (from the rows' ``sources``)."""
    seen: dict = {}
    for r in recipe.rows:
        for key, label in (r.get("sources") or {}).items():
            seen.setdefault(key, [])
            for part in str(label).split(" + "):
                if part not in seen[key]:
                    seen[key].append(part)
    if not seen:
        return str(recipe.provenance.get("cost_model", ""))
    lines = []
    for part in ("verify", "draft"):
        cells = [f"{k.split('.', 1)[1]}: {' + '.join(v)}" for k, v in seen.items() if k.startswith(part + ".")]
        if cells:
            lines.append(f"{part}: " + "; ".join(cells))
    return "\n".join(lines)


def speedup_cell(row) -> str:
    """``1.45x (1.21-1.70)``: the predicted speedup and its interval; ``?`` marks an uncertain row."""
    text = f"{row['speedup']:.2f}x"
    iv = row.get("interval") or ()
    if len(iv) == 2 and row.get("draft_len", 0) > 0:
        text += f" ({iv[0]:.2f}-{iv[1]:.2f})"
    if row.get("uncertain"):
        text += " ?"
    return text + ("" if row.get("fits_memory", True) else " (OOM)")


def uncertainty_notes(recipe) -> list[str]:
    """What the intervals mean, where they come from, and how to settle the uncertain rows (once per table)."""
    from trtspec.recipes.intervals import load_intervals

    table = load_intervals()
    lines = [f"intervals (speedup column): {table.describe()} ({table.path}); widened by the published spread of "
             "the drafter's acceptance where the acceptance is a prior"]
    prior = {k: v.get("source", "") for k, v in (recipe.acceptance or {}).items()
             if str(v.get("name", "")).startswith("prior:")}
    for kind, src in prior.items():
        lines.append(f"acceptance ({kind}): {src[:400]}")
    unsure = [r for r in recipe.rows if r.get("uncertain")]
    if unsure:
        lines.append(f"? uncertain at batch {', '.join(str(r['batch']) for r in unsure)}: the interval straddles 1, "
                     f"so the model cannot say whether speculation wins there; settle it: {unsure[0]['settle']}")
    return lines


def render_table(recipe, console=None, title=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 220)
    t = Table(title=title or f"{recipe.model} on {recipe.gpu} (tp={recipe.tp}, quant={recipe.quant}, "
                             f"drafter={recipe.drafter}, context={recipe.context})")
    for col in ("batch", "drafter", "D", "nodes", "E[AL]", "draft ms", "verify ms", "step ms", "tok/s", "ms/tok/user",
                "speedup", "binding rule"):
        t.add_column(col, justify="right" if col not in ("drafter", "binding rule") else "left")
    for r in recipe.rows:
        d = str(r["draft_len"]) + (f" (sched {r['schedule_draft_len']})" if "schedule_draft_len" in r else "")
        t.add_row(str(r["batch"]), r["drafter"], d, str(r["num_nodes"]), f"{r['expected_al']:.2f}",
                  f"{r['draft_ms']:.3f}", f"{r['verify_ms']:.3f}", f"{r['step_ms']:.3f}", f"{r['tokens_per_s']:.0f}",
                  f"{r.get('latency_ms_per_token', 0.0):.2f}", speedup_cell(r), r["binding_rule"])
    console.print(t)
    for line in uncertainty_notes(recipe):
        console.print(line, markup=False)
    console.print("priced by (op class: source):\n" + priced_by(recipe), markup=False)
    cm = recipe.provenance.get("cost_model")
    if isinstance(cm, dict):
        split = cm.get("verify_split", 0.0)
        console.print(f"engine {cm.get('engine')}: fixed costs from {cm.get('engine_overheads')}; verification "
                      f"attention at 1+D query rows = packed + {split:.2f} x (split - packed), packed = the measured "
                      "one-row kernel x ceil(G*(1+D)/128), split = the one-row kernel at B*(1+D) requests "
                      + (f"(verify_split and fixed costs from the deployment calibration {cm['calibration']}; kernels x "
                         f"{cm.get('kernel_scale', 1.0):.3f})" if cm.get("calibration") else
                         "(verify_split fitted on the corpus: benchmarks/bench_fidelity.py --fit; "
                         "trtspec.recipes.pricing)"), markup=False)
    console.print(f"TensorRT-LLM speculative_config: {recipe.trtllm_speculative_config()}")
    console.print(f"vLLM num_speculative_tokens_per_batch_size: {recipe.vllm_schedule}")
    console.print(f"SGLang: {recipe.sglang}")
    if any(not r.get("fits_memory", True) for r in recipe.rows):
        console.print("[yellow]rows marked (OOM) do not fit in GPU memory even without speculation at this "
                      "tp/quant/context; elsewhere D is chosen among the configurations that fit[/yellow]")


def save_plot(plan_obj, recipe, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for row in recipe.rows:
        for drafter, curve in plan_obj.curves[row["batch"]].items():
            xs = sorted(curve)
            line, = ax.plot(xs, [curve[x] for x in xs], marker=".", label=f"B={row['batch']} {drafter}")
            if row["drafter"] in (drafter, "none") and row["draft_len"] in curve:
                ax.plot([row["draft_len"]], [curve[row["draft_len"]]], marker="o", markersize=10,
                        markerfacecolor="none", color=line.get_color())
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("draft length D")
    ax.set_ylabel("predicted speedup over D=0")
    ax.set_title(f"{recipe.model} on {recipe.gpu} (tp={recipe.tp}, {recipe.quant}); circles: chosen D")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@click.command("plan")
@click.option("--model", required=True, help="Built-in model name (e.g. llama-3.1-70b), HF model dir or config file.")
@click.option("--gpu", required=True, help="GPU from recipes/gpus (h200, b200, h100, ...).")
@parallel_options
@click.option("--quant", default=_DEF["quant"], show_default=True,
              help="Weight quantization: none|fp8|fp4|int4_awq|w4a8_awq (optionally ':attn=bf16').")
@click.option("--drafter", required=True, help="draft_model|eagle3|mtp|dflash|dspark|ngram|sa; a comma list "
                                               "lets the planner choose per batch (guideline 5).")
@click.option("--draft-model", default=None, help="Draft model (name|dir) for --drafter draft_model.")
@click.option("--draft-quant", default=None, help="Quantization of the drafter's weights (default: --quant).")
@click.option("--acceptance", multiple=True, help="FILE | prior:NAME | rates=a1,... | curve=AL1,AL2,... | al=A@D, for all drafters "
              "or as DRAFTER=SPEC (repeatable) per drafter (default: the prior that lists this model and drafter, "
              "else the closest published prior for the drafter by model family and size, named in the output, "
              "its interval widened by the published spread of acceptance; none for the drafter -> error).")
@click.option("--category", default=None, help="Use the acceptance profile's per-category rates (e.g. coding, math).")
@click.option("--batch", "batch", default=None, help="Comma-separated batch sizes (default 1,2,4,... up to "
                                                     "--max-batch-size).")
@click.option("--max-batch-size", type=int, default=None,
              help="Largest batch the engine will run [default: 256, or the largest --batch].")
@click.option("--context", default=str(_DEF["context"]), show_default=True,
              help="KV-cache length in tokens, or a comma list of context buckets (e.g. 1k,8k,32k; k = 1024): one "
                   "table per bucket. TensorRT-LLM's draft_len_schedule has only a batch axis: use the bucket of "
                   "the engine's --max-seq-len.")
@click.option("--engine", type=click.Choice(ENGINES), default=None,
              help="Serving engine whose measured kernels and per-step costs price the steps (recipes/engines) "
                   f"[default: a --calibration's engine, else {_DEF['engine']}].")
@click.option("--pricing", type=click.Choice(PRICINGS), default=_DEF["pricing"], show_default=True,
              help="perf-db: measured kernel data (aiconfigurator-core) where it exists, roofline elsewhere; "
                   "roofline: the analytic model alone.")
@click.option("--max-draft-len", type=int, default=_DEF["max_draft_len"], show_default=True, help="Largest D searched.")
@click.option("--draft-len", type=int, default=None, help="Evaluate this fixed D instead of optimizing (what-if).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=_DEF["objective"], show_default=True,
              help="throughput: max aggregate tok/s (smallest D within 0.1%); latency: min mean per-user ms/token "
                   "over the acceptance profile's categories (any gain counts).")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False), default=None,
              help="cost_table.json from `trtspec profile` (replaces the step times), or a deployment calibration "
                   "from `trtspec calibrate` (engine figures fitted to your own measured points; refused for another "
                   "model, GPU, engine, TP, EP, quant or drafter); the file's 'format' key says which.")
@click.option("--json", "as_json", is_flag=True, help="Print the recipe as JSON.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="PNG: speedup vs D per batch.")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the recipe YAML here.")
def plan(model, gpu, tp, quant, drafter, draft_model, draft_quant, acceptance, category, batch, max_batch_size, context,
         engine, pricing, ep, max_draft_len, draft_len, objective, calibration, as_json, plot, out):
    """Predict, per batch size, the draft length D (and tree) that maximizes throughput, and why."""
    from pathlib import Path

    from trtspec.recipes.api import build_request, recipe_from_plan
    from trtspec.recipes.errors import RecipeError
    from trtspec.recipes.optimizer import plan as run_plan

    from trtspec.recipes.drafters import DRAFTERS

    try:  # a model the planner cannot describe: one line and the usage-error status, before any work
        from trtspec.recipes.arch import load_architecture

        load_architecture(model)
    except RecipeError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)

    per_drafter, common = {}, None
    for item in acceptance:
        head, sep, rest = item.partition("=")
        if sep and head in DRAFTERS:
            per_drafter[head] = rest
        elif common is None:
            common = item
        else:
            raise click.BadParameter("give one --acceptance for all drafters, or DRAFTER=SPEC per drafter",
                                     param_hint="--acceptance")
    if per_drafter:
        names = [d.strip() for d in drafter.split(",")]
        acceptance = {n: per_drafter.get(n, common) for n in names}
    else:
        acceptance = common
    batches = _batches(batch)
    contexts = _contexts(context)
    if max_batch_size is None:
        max_batch_size = max(batches) if batches else 256
    recipes = []
    for ctx in contexts:
        try:
            req = build_request(model=model, gpu=gpu, drafters=drafter, acceptance=acceptance, tp=tp, quant=quant,
                                batches=batches, context=ctx, max_draft_len=max_draft_len,
                                objective=objective, draft_len=draft_len, calibration=calibration,
                                draft_model=draft_model, max_batch_size=max_batch_size, draft_quant=draft_quant,
                                category=category, engine=engine, pricing=pricing, ep=ep)
            result = run_plan(req)
        except RecipeError as exc:
            raise click.ClickException(str(exc)) from exc
        label = Path(model).name if Path(model).exists() else req.model.name
        recipes.append((ctx, result, recipe_from_plan(result, model_label=label,
                                                      max_batch_size=max(max_batch_size, max(req.batches)))))
    if as_json:
        doc = recipes[0][2].to_dict() if len(recipes) == 1 else \
            {"contexts": {str(ctx): r.to_dict() for ctx, _, r in recipes}}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for ctx, _, recipe in recipes:
            if len(recipes) > 1:
                click.echo(f"\n== context bucket {ctx} tokens ==")
            render_table(recipe)
        if len(recipes) > 1:
            click.echo("TensorRT-LLM's draft_len_schedule has a batch axis only: emit the bucket of the engine's "
                       "--max-seq-len (`trtspec build` plans at its configured max_seq_len).")
    if plot:
        save_plot(recipes[-1][1], recipes[-1][2], plot)
    if out:
        if len(recipes) > 1:
            raise click.ClickException("--out writes one recipe: give a single --context")
        recipes[0][2].save(out)
    if not as_json and (plot or out):
        click.echo(" ".join(x for x in (f"plot: {plot}" if plot else "", f"recipe: {out}" if out else "") if x))
