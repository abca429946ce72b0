"""``trtspec generate``: run the reference speculative decoder on prompts and print text and metrics."""
from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.runtime.params import DRAFTERS, SPECULATION_MODES, VERIFY_METHODS, SamplingParams, SpecConfig

_S, _P = SamplingParams(), SpecConfig()


def _read_batch_file(path: Path) -> list[str]:
    """Prompts from a JSONL file: one JSON string or object with a ``prompt`` (or ``text``) field per line."""
    from trtspec.jsonl import JsonlError, read_jsonl

    prompts = []
    try:
        for n, item in read_jsonl(path):
            text = item if isinstance(item, str) else (
                item.get("prompt") or item.get("text") if isinstance(item, dict) else None)
            if not isinstance(text, str):
                raise click.BadParameter(f"line {n}: expected a string or an object with a 'prompt' field",
                                         param_hint="--batch-file")
            prompts.append(text)
    except JsonlError as e:
        raise click.BadParameter(str(e), param_hint="--batch-file") from None
    return prompts


def _parse_schedule(text: str | None) -> dict[int, int] | None:
    """``"4:4,8:2"`` -> ``{4: 4, 8: 2}``."""
    if not text:
        return None
    try:
        return {int(k): int(v) for k, v in (item.split(":") for item in text.replace(" ", "").split(","))}
    except ValueError:
        raise click.BadParameter(f"expected 'BATCH:D,BATCH:D,...', got {text!r}",
                                 param_hint="--draft-len-schedule") from None


def _default_pair(drafter: str) -> tuple[Path, Path | None]:
    try:
        from trtspec.zoo import demo_pair
    except ImportError:
        raise click.UsageError("no --target given and the demo pair is not installed (trtspec.zoo is missing); "
                               "pass --target DIR") from None
    try:
        return demo_pair(drafter)
    except (FileNotFoundError, ValueError) as e:
        raise click.UsageError(f"no --target given and the demo pair is not installed ({e}); pass --target DIR") from None


@click.command()
@click.argument("prompts", nargs=-1)
@click.option("--target", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Target model directory (Hugging Face: config.json, *.safetensors, tokenizer.json). "
                   "Default: the demo pair.")
@click.option("--draft", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Draft model directory (draft_model), EAGLE-3 head directory (eagle3) or DFlash / DSpark head "
                   "directory (dflash / dspark); mtp and ngram take none (mtp drafts with the target's own MTP "
                   "layer).")
@click.option("--drafter", type=click.Choice(DRAFTERS), default="draft_model", show_default=True,
              help="Drafting mechanism.")
@click.option("--draft-len", "draft_len", type=int, default=None,
              help=f"D: draft tokens per step for a chain (0 = no speculation) [default: {_P.draft_len}; dflash / "
                   "dspark: every draft of the head's block].")
@click.option("--tree", help="Top-k tree instead of a chain: 'topk=K,depth=L'.")
@click.option("--draft-len-schedule", "schedule",
              help="Batch size -> D, TensorRT-LLM semantics, e.g. '4:4,8:2,32:1' (batch 1-4: 4, 5-8: 2, 9-32: 1, "
                   "above: 0). Overrides --draft-len.")
@click.option("--verify", type=click.Choice(VERIFY_METHODS),
              help="Verification: greedy (default at temperature 0), sample (default above 0), block (chains).")
@click.option("--speculation", type=click.Choice(SPECULATION_MODES), default=_P.speculation, show_default=True,
              help="static: --draft-len (or the schedule's D) every step; adaptive: each step's draft lengths in "
                   "0..D chosen for the batch's best expected tokens/s from the device's step costs and each "
                   "request's live acceptance.")
@click.option("--cost-table", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--speculation adaptive: the device's step costs (`trtspec profile --verify greedy,sample`) "
                   "[default: measured before generating].")
@click.option("--temperature", type=float, default=_S.temperature, show_default=True, help="0 = greedy.")
@click.option("--top-k", "top_k", type=int, default=_S.top_k, show_default=True, help="0 = off.")
@click.option("--top-p", "top_p", type=float, default=_S.top_p, show_default=True, help="1.0 = off.")
@click.option("--max-new-tokens", "max_new_tokens", type=int, default=_S.max_new_tokens, show_default=True)
@click.option("--seed", type=int, default=_P.seed, show_default=True, help="Random stream of sampling.")
@click.option("--batch-file", "batch_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL file of prompts (a string or {\"prompt\": ...} per line), decoded as one batch.")
@click.option("--device", default="cpu", show_default=True, help="cpu | cuda | cuda:N.")
@click.option("--threads", type=int, default=0, show_default=True, help="CPU threads for torch (0 = torch's default).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (texts and metrics) instead of tables.")
def generate(prompts, target, draft, drafter, draft_len, tree, schedule, verify, speculation, cost_table, temperature,
             top_k, top_p, max_new_tokens, seed, batch_file, device, threads, as_json):
    """Generate text for PROMPTS with speculative decoding and print the metrics (AL, tokens/s)."""
    all_prompts = list(prompts) + (_read_batch_file(batch_file) if batch_file else [])
    if not all_prompts:
        raise click.UsageError("give at least one PROMPT or --batch-file")
    if target is None:
        target, demo_drafter = _default_pair(drafter)
        draft = draft if draft is not None else demo_drafter
    if verify is None:
        verify = "greedy" if temperature == 0 else "sample"
    try:
        SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    import torch

    from trtspec.runtime import load_pipeline
    from trtspec.runtime.config import ModelFormatError

    if threads < 0:
        raise click.BadParameter(f"must be >= 0, got {threads}", param_hint="--threads")
    if threads:
        torch.set_num_threads(threads)

    try:
        pipe = load_pipeline(target, draft, drafter=drafter, draft_len=draft_len, tree=tree, verify=verify,
                             draft_len_schedule=_parse_schedule(schedule), device=device, seed=seed)
    except (ValueError, ModelFormatError) as e:
        raise click.UsageError(str(e)) from None
    if speculation == "adaptive":
        from trtspec.bench.adaptive import adaptive_config

        if cost_table is None and not as_json:
            click.echo("measuring this device's step costs for adaptive speculation (no --cost-table)", err=True)
        try:
            pipe = pipe.with_speculation("adaptive", adaptive_config(pipe, drafter, cost_table=cost_table,
                                                                     target=target, draft=draft))
        except ValueError as e:
            raise click.UsageError(f"--cost-table: {e}") from None
    with _progress(as_json, len(all_prompts) * max_new_tokens) as advance:
        try:
            gens = pipe.generate(all_prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                 top_p=top_p, seed=seed, progress=advance)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
    total = pipe.last_stats
    if as_json:
        click.echo(json.dumps({
            "target": str(target), "draft": None if draft is None else str(draft), "drafter": drafter,
            "spec": {"draft_len": pipe.spec.draft_len, "tree": tree, "verify": verify, "speculation": speculation},
            "generations": [{"prompt": p, "text": g.text, "token_ids": g.token_ids, "stats": g.stats.to_dict()}
                            for p, g in zip(all_prompts, gens)],
            "stats": total.to_dict(),
        }, indent=2))
        return
    _print_rich(all_prompts, gens, total)


class _progress:
    """A rich progress bar over generated tokens (silent with --json)."""

    def __init__(self, quiet: bool, total: int):
        self.quiet, self.total = quiet, total

    def __enter__(self):
        if self.quiet:
            return None
        from rich.progress import Progress

        self.bar = Progress(transient=True)
        self.bar.start()
        task = self.bar.add_task("generating", total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc):
        if not self.quiet:
            self.bar.stop()


def _print_rich(prompts, gens, total) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    for p, g in zip(prompts, gens):
        con.rule(f"[bold]{p[:60]!r}")
        con.print(p + g.text, markup=False, highlight=False)
    table = Table(title="speculative decoding")
    for col in ("request", "tokens", "steps", "AL", "accept rate", "tokens/s"):
        table.add_column(col, justify="right")
    for i, g in enumerate(gens):
        s = g.stats
        table.add_row(str(i), str(s.output_tokens), str(s.steps), f"{s.mean_al:.2f}", f"{s.acceptance_rate:.2f}",
                      f"{s.tokens_per_s:.1f}")
    table.add_row("all", str(total.output_tokens), str(total.steps), f"{total.mean_al:.2f}",
                  f"{total.acceptance_rate:.2f}", f"{total.tokens_per_s:.1f}", style="bold")
    con.print(table)
    con.print(f"draft {total.draft_time_s:.3f} s · verify {total.verify_time_s:.3f} s · "
              f"total {total.total_time_s:.3f} s · accepted per position {total.accepted_per_pos}")
