"""``trtspec bench``: acceptance (AL, a_k, per category) and throughput on SPEED-Bench-format prompts,
against the local runtime, an OpenAI-compatible server or trtspec's Triton model; with
``--sweep-draft-len``, the predicted-versus-measured draft-length comparison."""
from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.bench.config import DRAFTERS, ENGINES, BenchConfig, default_of, help_of
from trtspec.bench.metrics import CI_METHODS
from trtspec.bench.runners import RunConfig
from trtspec.bench.sweep import SweepConfig

_R = RunConfig()
_S = SweepConfig()


def _b(name):
    return dict(default=default_of(BenchConfig, name), help=help_of(BenchConfig, name))


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


@click.command("bench")
@click.option("--target", type=click.Path(path_type=Path), default=None,
              help="Target model directory or trtspec bundle for the local runtime [default: the demo pair].")
@click.option("--draft", type=click.Path(path_type=Path), default=None,
              help="Draft model / EAGLE-3 head directory [default: the bundle's or the demo pair's draft].")
@click.option("--drafter", type=click.Choice(DRAFTERS), **_b("drafter"))
@click.option("--draft-len", type=int, **_b("draft_len"))
@click.option("--verify", type=click.Choice(["greedy", "sample", "block"]), **_b("verify"))
@click.option("--speculation", type=click.Choice(["static", "adaptive"]), **_b("speculation"))
@click.option("--cost-table", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help="--speculation adaptive: the device's step costs (`trtspec profile --verify greedy,sample`) "
                   "[default: the bundle's cost_table.json, else measured before the run].")
@click.option("--device", **_b("device"))
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), **_b("dtype"))
@click.option("--unquantized-target", **_b("unquantized_target"))
@click.option("--server", default=None, help="Base URL of an OpenAI-compatible server (http://host:port) instead of "
              "the local runtime; acceptance comes from its Prometheus /metrics.")
@click.option("--model", "server_model", default=None, help="Model name sent to --server (or the Triton model name).")
@click.option("--metrics-url", default=None, help="Prometheus endpoint [default: <server>/metrics; for --triton "
              "http://<its host>:8002/metrics].")
@click.option("--engine", type=click.Choice(ENGINES), **_b("engine"))
@click.option("--triton", default=None, help="host:port of Triton's gRPC endpoint serving trtspec's model "
              "(--model names it, default 'trtspec').")
@click.option("--tokenizer", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              help="Model directory whose chat template formats prompts sent to --server/--triton (and whose "
                   "tokenizer.json counts Triton's output tokens) [default: raw prompts].")
@click.option("--dataset", **_b("dataset"))
@click.option("--config", "dataset_config", **_b("config"))
@click.option("--category", "categories", multiple=True, help="Keep only this category (repeatable).")
@click.option("--limit-per-category", type=int, **_b("limit_per_category"))
@click.option("--code-prompts", type=int, **_b("code_prompts"))
@click.option("--max-new-tokens", type=int, default=_R.max_new_tokens, show_default=True, help="Tokens per turn.")
@click.option("--temperature", type=float, default=_R.temperature, show_default=True, help="0 = greedy.")
@click.option("--top-k", type=int, default=_R.top_k, show_default=True, help="0 = off.")
@click.option("--top-p", type=float, default=_R.top_p, show_default=True, help="1 = off.")
@click.option("--seed", type=int, default=_R.seed, show_default=True)
@click.option("--concurrency", type=int, default=_R.concurrency, show_default=True,
              help="Requests in flight (local runtime: batch size; servers: client threads).")
@click.option("--single-turn", is_flag=True, help="Answer only the first turn of multi-turn questions.")
@click.option("--ci", type=click.Choice(CI_METHODS), **_b("ci"))
@click.option("--out", type=click.Path(path_type=Path), **_b("out"))
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--sweep-draft-len", default=None, help="Sweep mode: draft lengths to measure, e.g. '0..8'.")
@click.option("--batch", "sweep_batch", default=_csv(_S.batch_sizes), show_default=True,
              help="Sweep mode: batch sizes, e.g. '1,4,16'.")
@click.option("--rounds", type=int, default=_S.rounds, show_default=True, help="Sweep mode: batches per (B, D) measurement.")
@click.option("--repeats", type=int, default=_S.repeats, show_default=True,
              help="Sweep mode: interleaved passes over the grid (median tokens/s kept).")
@click.option("--clock", type=click.Choice(["wall", "cpu"]), default=_S.clock, show_default=True,
              help="Sweep mode: wall time, or process CPU time single-threaded (busy shared CPU machines).")
@click.option("--calibration", type=click.Path(path_type=Path, exists=True), default=None,
              help="Sweep mode: cost_table.json from `trtspec profile` [default: profile now on the sweep grid].")
@click.option("--gpu", default="h200", show_default=True,
              help="Sweep mode: GPU name passed to the planner (the calibration replaces its step times).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
def bench(target, draft, drafter, draft_len, verify, speculation, cost_table, device, dtype, unquantized_target, server, server_model,
          metrics_url, engine, triton,
          tokenizer, dataset, dataset_config, categories, limit_per_category, code_prompts, max_new_tokens, temperature, top_k,
          top_p, seed, concurrency, single_turn, ci, out, no_plots, sweep_draft_len, sweep_batch, rounds, repeats,
          clock, calibration, gpu, as_json):
    """Measure acceptance length (bonus included) per category with confidence intervals, per-position
    acceptance a_k, joint acceptance, AL histogram and tokens/s; write acceptance.json (for
    `trtspec plan --acceptance`), bench.json, report.md and PNG plots into --out.

    A quantized --target (e.g. a `trtspec build` bundle: FP8 by default) is benched side by side
    with its unquantized source on the same prompts and draft (see --unquantized-target): the
    report adds AL per category of both and their difference with a paired bootstrap interval."""
    from rich.console import Console
    from rich.progress import Progress

    from trtspec.bench import report
    from trtspec.bench.config import parse_int_list
    from trtspec.bench.datasets import DatasetError, load_prompts
    from trtspec.bench.metrics import throughput

    console = Console(stderr=True)
    if server and triton:
        raise click.UsageError("--server and --triton are exclusive: pick one runner")
    try:
        cfg = BenchConfig(dataset=dataset, config=dataset_config, limit_per_category=limit_per_category,
                          code_prompts=code_prompts, drafter=drafter, draft_len=draft_len, verify=verify,
                          speculation=speculation,
                          device=device, dtype=dtype, unquantized_target=unquantized_target, engine=engine, ci=ci,
                          out=str(out))
        run_cfg = RunConfig(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                            seed=seed, concurrency=concurrency, multiturn=not single_turn)
        prompts = load_prompts(cfg.dataset, config=cfg.config, categories=list(categories) or None,
                               limit_per_category=cfg.limit_per_category,
                               code_prompts=cfg.code_prompts if cfg.dataset == "builtin" else 0)
    except (ValueError, DatasetError) as e:
        raise click.UsageError(str(e)) from None
    if not prompts:
        raise click.UsageError(f"--dataset {dataset}: no prompts left after filtering")

    local = not server and not triton
    if local and target is None:
        from trtspec.zoo import demo_pair

        try:
            target, demo_drafter = demo_pair(drafter)
            draft = draft if draft is not None else demo_drafter
        except (FileNotFoundError, ValueError) as e:
            raise click.UsageError(f"--target not given and {e}") from None

    if sweep_draft_len is not None:
        if not local:
            raise click.UsageError("--sweep-draft-len measures the local runtime; drop --server/--triton")
        _sweep(console, target, draft, prompts, cfg, sweep_draft_len, sweep_batch, rounds, repeats, max_new_tokens,
               calibration, gpu, out, as_json, parse_int_list, clock)
        return

    if cfg.draft_len < 1:
        raise click.UsageError("--draft-len must be >= 1 to measure acceptance")
    baseline, baseline_why = _baseline(local, target, cfg)
    from trtspec.bench.datasets import load_chat_template
    from trtspec.bench.runners import LocalRunner, OpenAIRunner, TritonRunner, build_run_profile

    chat = load_chat_template(tokenizer) if tokenizer else None
    tok = None
    if tokenizer and (tokenizer / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    if server:
        if not server_model:
            raise click.UsageError("--server needs --model (the served model name)")
        runner = OpenAIRunner(server, server_model, metrics_url=metrics_url, engine=cfg.engine,
                              draft_len=cfg.draft_len, chat=chat)
    elif triton:
        runner = TritonRunner(triton, server_model or "trtspec", draft_len=cfg.draft_len, tokenizer=tok, chat=chat,
                              metrics_url=metrics_url)
    else:
        try:
            runner = LocalRunner.load(target, draft, drafter=cfg.drafter, draft_len=cfg.draft_len, verify=cfg.verify,
                                      device=cfg.device, dtype=cfg.dtype)
            if cfg.speculation == "adaptive":
                _adapt(console, runner, target, draft, cfg, cost_table)
        except (ValueError, FileNotFoundError) as e:
            raise click.UsageError(str(e)) from None
    base_runner = _load_baseline(target, draft, baseline, cfg) if baseline is not None else None
    if base_runner is not None and cfg.speculation == "adaptive":   # the same controller settings on both
        base_runner.pipeline = base_runner.pipeline.with_speculation("adaptive", runner.pipeline.adaptive)
    turns = sum(len(p.turns) if run_cfg.multiturn else 1 for p in prompts)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"bench ({len(prompts)} prompts)", total=len(prompts) if not local else turns)
        run = runner.run(prompts, run_cfg, progress=lambda n: bar.advance(task, n))
    profile = build_run_profile(run, drafter=cfg.drafter, draft_len=cfg.draft_len, ci_method=cfg.ci, seed=seed)
    tput = throughput(run.records, run.wall_s) if run.wall_s > 0 else None
    meta = {"runner": "server" if server else "triton" if triton else "local", "target": str(target or server or triton),
            "draft": str(draft), "drafter": cfg.drafter, "draft_len": cfg.draft_len, "speculation": cfg.speculation,
            "dataset": cfg.dataset,
            "config": cfg.config, "prompts": len(prompts), "max_new_tokens": run_cfg.max_new_tokens,
            "temperature": run_cfg.temperature, "concurrency": run_cfg.concurrency, "ci": cfg.ci}
    if server and run.category_deltas:  # the engine whose metrics answered (trtspec calibrate reads it)
        meta["engine"] = next(iter(run.category_deltas.values())).engine
    comparison = None
    if local:
        meta["target_quant"] = runner.pipeline.target.quant.to_dict() if runner.pipeline.target.quant else None
        meta["unquantized_target"] = str(baseline) if baseline else f"none: {baseline_why}"
        if base_runner is not None:
            comparison = _compare_unquantized(console, target, base_runner, prompts, cfg, run_cfg, run, profile, seed)
    paths = report.write_outputs(out, profile, tput, meta, plots=not no_plots, comparison=comparison)
    if as_json:
        click.echo(json.dumps({**report.result_dict(profile, tput, meta, comparison),
                               "files": {k: str(v) for k, v in paths.items()}}, indent=2))
        return
    o = profile.overall
    ci_txt = f" [{o.ci.low:.3f}, {o.ci.high:.3f}]" if o.ci else ""
    console.print(f"mean AL {o.mean_al:.3f}{ci_txt} over {o.num_steps} steps, a_k = "
                  + ", ".join(f"{a:.2f}" for a in o.rates))
    for c, s in profile.per_category.items():
        console.print(f"  {c:<14} AL {s.mean_al:.3f}  ({s.num_requests} requests)")
    if tput:
        console.print(f"{tput.tokens_per_s:.1f} tokens/s, {tput.per_user_tokens_per_s:.1f} per user")
    if comparison is not None:
        console.print(report.verdict(comparison))
        for c, r in comparison["per_category"].items():
            d = r["delta_ci"]
            console.print(f"  {c:<14} AL {r['quantized']['mean_al']:.3f} quantized vs {r['unquantized']['mean_al']:.3f}"
                          f"  (delta {r['delta']:+.3f}" + (f", CI [{d[0]:+.3f}, {d[1]:+.3f}])" if d else ")"))
    console.print(f"[green]wrote[/] {paths['acceptance']}, {paths['report']}")


def _adapt(console, runner, target, draft, cfg, cost_table):
    """Switch the local runner to adaptive speculation (step costs and prior: ``trtspec.bench.adaptive``)."""
    from trtspec.bench.adaptive import adaptive_config
    from trtspec.bench.runners import resolve_pair

    target_dir, bundle_draft, _ = resolve_pair(target)
    bundle = Path(target) if target_dir != Path(target) else None
    if cost_table is None and (bundle is None or not (bundle / "cost_table.json").is_file()):
        console.print("measuring this device's step costs for adaptive speculation (no --cost-table)")
    pipe = runner.pipeline
    runner.pipeline = pipe.with_speculation("adaptive", adaptive_config(
        pipe, cfg.drafter, cost_table=cost_table, bundle=bundle, target=target_dir,
        draft=draft if draft is not None else bundle_draft))
    runner.source += ", speculation=adaptive"


def _baseline(local, target, cfg):
    """(unquantized checkpoint to compare with, why) -- resolved before any model loads."""
    from trtspec.bench.runners import unquantized_baseline

    if not local:
        if cfg.unquantized_target not in ("auto", "none"):
            raise click.UsageError("--unquantized-target compares local-runtime runs; drop --server/--triton")
        return None, "server runs are not compared"
    try:
        return unquantized_baseline(target, cfg.unquantized_target)
    except (ValueError, FileNotFoundError) as e:   # ModelFormatError is a ValueError
        raise click.UsageError(str(e)) from None


def _load_baseline(target, draft, baseline, cfg):
    """A LocalRunner on the unquantized ``baseline`` with the quantized run's draft and drafter
    (loaded before either run, so that a bad pair fails before the work)."""
    from trtspec.bench.runners import LocalRunner, resolve_pair

    _, bundle_draft, bundle_drafter = resolve_pair(target)
    try:
        return LocalRunner.load(baseline, draft if draft is not None else bundle_draft,
                                drafter=bundle_drafter or cfg.drafter, draft_len=cfg.draft_len, verify=cfg.verify,
                                device=cfg.device, dtype=cfg.dtype)
    except (ValueError, FileNotFoundError) as e:
        raise click.UsageError(f"--unquantized-target {baseline}: {e}") from None


def _compare_unquantized(console, target, base_runner, prompts, cfg, run_cfg, run, profile, seed):
    """Run the same prompts on the unquantized target; the comparison table."""
    from rich.progress import Progress

    from trtspec.bench import report
    from trtspec.bench.runners import build_run_profile, checkpoint_quant, resolve_pair

    target_dir = resolve_pair(target)[0]
    turns = sum(len(p.turns) if run_cfg.multiturn else 1 for p in prompts)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task(f"unquantized target ({len(prompts)} prompts)", total=turns)
        base_run = base_runner.run(prompts, run_cfg, progress=lambda n: bar.advance(task, n))
    base_profile = build_run_profile(base_run, drafter=cfg.drafter, draft_len=cfg.draft_len, ci_method=cfg.ci,
                                     seed=seed)
    return report.compare_targets(profile, run.records, base_profile, base_run.records, quant_name=str(target_dir),
                                  base_name=str(base_runner.pipeline.target_dir),
                                  quant_format=checkpoint_quant(target_dir) or "quantized", seed=seed)


def _sweep(console, target, draft, prompts, cfg, sweep_draft_len, sweep_batch, rounds, repeats, max_new_tokens,
           calibration, gpu, out, as_json, parse_int_list, clock):
    from rich.progress import Progress

    from trtspec.bench.sweep import SweepConfig, run_sweep

    try:
        scfg = SweepConfig(draft_lens=parse_int_list(sweep_draft_len, "--sweep-draft-len"),
                           batch_sizes=parse_int_list(sweep_batch, "--batch"), rounds=rounds, repeats=repeats,
                           max_new_tokens=max_new_tokens, clock=clock)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("sweep", total=len(scfg.draft_lens) * len(scfg.batch_sizes) * scfg.repeats)
        result = run_sweep(target, draft, prompts, scfg, out_dir=out, drafter=cfg.drafter, device=cfg.device,
                           dtype=cfg.dtype, calibration=calibration, gpu=gpu, progress=lambda: bar.advance(task))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(result["table"])
    if not result["planner_available"]:
        console.print("planner (trtspec.recipes.api) not installed: 'planner' column empty")
    console.print(f"[green]wrote[/] {Path(out) / 'sweep.json'}")
