"""``trtspec profile``: measure target and drafter step times on this device -> cost_table.json."""
from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.bench.profile import ProfileConfig

_D = ProfileConfig()


def _ints(ctx, param, value):
    if value is None:
        return None
    from trtspec.bench.config import parse_int_list

    try:
        return parse_int_list(value, "--" + param.name.replace("_", "-"))
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


@click.command("profile")
@click.option("--target", type=click.Path(path_type=Path), default=None,
              help="Target model directory or trtspec bundle [default: the demo pair's target].")
@click.option("--draft", type=click.Path(path_type=Path), default=None,
              help="Drafter weights directory [default: the bundle's draft, or the demo's for --drafter].")
@click.option("--drafter", type=click.Choice(["draft_model", "eagle3", "mtp"]), default="draft_model", show_default=True,
              help="What --draft holds: a draft model, or an EAGLE-3 head (profiled with --method engine); mtp: "
                   "the target's own MTP layer (no --draft; --method engine).")
@click.option("--batch", "batch_sizes", default=_csv(_D.batch_sizes), callback=_ints, show_default=True,
              help="Batch sizes B to measure ('1,4,16' or '1..8').")
@click.option("--tokens", default=_csv(_D.tokens), callback=_ints, show_default=True,
              help="New tokens per request of a target step (D+1 for a chain of D drafts).")
@click.option("--draft-tokens", default=_csv(_D.draft_tokens), callback=_ints, show_default=True,
              help="Tokens per request of a draft step (1 = one autoregressive draft token).")
@click.option("--catch-up-tokens", default=_csv(_D.catch_up_tokens), callback=_ints, show_default=True,
              help="Backlogs U timed for the table's 'catch_up' section (--method engine; a drafter with its own "
                   "cache feeding U committed tokens per request: what adaptive speculation pays to start drafting).")
@click.option("--context-len", type=int, default=_D.context_len, show_default=True,
              help="Cached tokens per request before the step.")
@click.option("--warmup", type=int, default=_D.warmup, show_default=True, help="Untimed calls per point.")
@click.option("--repeats", type=int, default=_D.repeats, show_default=True,
              help="Timed calls per point (the median is kept).")
@click.option("--device", default=_D.device, show_default=True, help="cpu or cuda[:N].")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=_D.dtype, show_default=True)
@click.option("--clock", type=click.Choice(["wall", "cpu"]), default=_D.clock, show_default=True,
              help="wall time, or this process's CPU time single-threaded (for busy shared CPU machines).")
@click.option("--method", type=click.Choice(["engine", "forward"]), default=_D.method, show_default=True,
              help="engine: time trtspec runtime steps (draft time fitted c + D*t, c folded into the target); "
                   "forward: bare model forwards (no runtime overhead).")
@click.option("--verify", default=_csv(_D.verify), show_default=True,
              help="Verification methods timed (--method engine): 'greedy' or 'greedy,sample' (adds the table's "
                   "'sample' section: sampled steps build probability rows; adaptive speculation prices them).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("cost_table.json"), show_default=True,
              help="Where to write the cost table (read by `trtspec plan --calibration`).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON on stdout.")
def profile(target, draft, drafter, batch_sizes, tokens, draft_tokens, catch_up_tokens, context_len, warmup, repeats, device, dtype,
            clock, method, verify, out, as_json):
    """Measure the target's step time T(B, tokens per request) and the draft model's step time on
    this device (warm-up, repeats, median) and write cost_table.json for `trtspec plan --calibration`."""
    from rich.console import Console
    from rich.progress import Progress

    from trtspec.bench.profile import grid_points, profile_pair
    from trtspec.bench.runners import resolve_pair

    console = Console(stderr=True)
    try:
        cfg = ProfileConfig(batch_sizes=batch_sizes, tokens=tokens, draft_tokens=draft_tokens,
                            catch_up_tokens=catch_up_tokens,
                            context_len=context_len, warmup=warmup, repeats=repeats, device=device, dtype=dtype,
                            method=method, clock=clock, verify=tuple(v.strip() for v in verify.split(",")))
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if target is None:
        from trtspec.zoo import demo_pair

        try:
            target, demo_drafter = demo_pair(drafter)
            draft = draft if draft is not None else demo_drafter
        except FileNotFoundError as e:
            raise click.UsageError(f"--target not given and {e}") from None
    target_dir, bundle_draft, _ = resolve_pair(target)
    draft = draft if draft is not None else bundle_draft
    if not (Path(target_dir) / "config.json").is_file():
        raise click.UsageError(f"--target {target}: no config.json (expected a model directory or trtspec bundle)")
    if draft is not None and not (Path(draft) / "config.json").is_file():
        raise click.UsageError(f"--draft {draft}: no config.json")
    if drafter == "eagle3" and cfg.method != "engine":
        raise click.UsageError("--drafter eagle3: an EAGLE-3 head runs on the target's hidden states, so it is "
                               "profiled with --method engine (speculative steps), not --method forward")
    if draft is None and cfg.method == "engine" and drafter != "mtp":
        raise click.UsageError("--method engine needs --draft (it times speculative steps); or use --method forward")
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("profiling", total=grid_points(cfg, draft is not None))
        table = profile_pair(target_dir, draft, cfg, progress=lambda: bar.advance(task), drafter=drafter)
    path = table.save(out)
    if as_json:
        click.echo(json.dumps(table.to_dict(), indent=2))
    else:
        console.print(f"[green]wrote[/] {path}  ({table.device})")
        for b, row in table.target.items():
            console.print(f"  target B={b}: " + ", ".join(f"{t}:{s * 1e3:.2f}ms" for t, s in row.items()))
        for b, row in table.draft.items():
            console.print(f"  draft  B={b}: " + ", ".join(f"{t}:{s * 1e3:.2f}ms" for t, s in row.items()))
