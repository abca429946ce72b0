"""Output tokens/s of the reference runtime with and without speculation, side by side, and AL.

Same runtime, same prompts, same target: the baseline is the pipeline with D = 0 (plain decoding
through the same step). Greedy decoding, so both produce identical tokens (checked).

    python benchmarks/bench_runtime.py [--target DIR --draft DIR] [--drafter ngram|eagle3|dflash|dspark]
        [--draft-len D | --tree topk=K,depth=L] [--batch-sizes 1,4,16] [--max-new-tokens N]
        [--prompts generic|code] [--num-prompts N] [--repeats R] [--clock wall|cpu] [--threads T]
        [--json] [--plot out.png]

With no --target it uses the demo pair (``trtspec.zoo.demo_paths()``; ``--drafter eagle3|dflash|dspark``
its heads). At batch size B every prompt of the set is decoded, B at a time (a set smaller than
B is repeated to fill one batch). ``--prompts code``: the first 64 tokens of held-out standard-library
functions (the demo pair's domain, as in its model card; needs the target's tokenizer.json).
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click

PROMPTS = [
    "def fib(n):", "The capital of France is", "import numpy as np\n", "Once upon a time,",
    "for i in range(10):", "SELECT name FROM users WHERE", "The quick brown fox", "class Stack:\n    def",
]


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _timed(pipe, prompt_ids, max_new_tokens, clock=time.perf_counter):
    t0 = clock()
    outs = pipe.generate_ids(prompt_ids, max_new_tokens=max_new_tokens)
    return outs, clock() - t0, pipe.last_stats


def code_prompts(target: Path, n: int) -> list[list[int]]:
    """Token ids of ``n`` held-out function prompts (64 tokens each), tokenized with the target's tokenizer."""
    from tokenizers import Tokenizer

    from trtspec.zoo import data

    tok = Tokenizer.from_file(str(Path(target) / "tokenizer.json"))
    return data.function_prompts(data.CorpusSplit.build(), tok, n, 64)


def batches(prompt_ids: list[list[int]], B: int) -> list[list[list[int]]]:
    """Every prompt once, ``B`` at a time (the last batch may be smaller); fewer than B prompts are repeated."""
    if len(prompt_ids) < B:
        return [[prompt_ids[i % len(prompt_ids)] for i in range(B)]]
    return [prompt_ids[i:i + B] for i in range(0, len(prompt_ids), B)]


def bench(pipe, batch_sizes, max_new_tokens, repeats=3, clock="wall", prompt_ids=None):
    """Rows of {batch, tokens_per_s_base, tokens_per_s_spec, speedup, mean_al, acceptance_rate}.

    Fair by construction: one process (same threads, same weights), both paths warmed up at every
    batch size, plain and speculative runs interleaved ``repeats`` times, and the medians reported
    (tokens/s and speedup from the median times). ``clock``: ``wall`` (elapsed) or ``cpu`` (this
    process's CPU time: with one thread, the time it ran, not the time other work on a shared
    machine held the cores).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    now = CLOCKS[clock]
    base = pipe.without_speculation()
    tok = pipe.tokenizer
    from trtspec.runtime.stats import SpecStats

    if prompt_ids is None:
        prompt_ids = [tok.encode(p) for p in PROMPTS]
    rows = []
    for B in batch_sizes:
        groups = batches(prompt_ids, B)
        _timed(base, groups[0], 8)                                 # warm up both paths at this B
        _timed(pipe, groups[0], 8)
        t_base, t_spec = [], []
        for _ in range(repeats):
            t_base.append(0.0)
            t_spec.append(0.0)
            stats, n = SpecStats(), 0
            for ids in groups:
                ref, dt, _ = _timed(base, ids, max_new_tokens, now)
                t_base[-1] += dt
                out, dt, st = _timed(pipe, ids, max_new_tokens, now)
                t_spec[-1] += dt
                stats.merge(st)
                n += sum(len(o) for o, _ in out)
                if [o for o, _ in out] != [o for o, _ in ref]:
                    raise RuntimeError(f"B={B}: speculative output differs from plain greedy decoding")
        rows.append({"batch": B, "output_tokens": n, "tokens_per_s_base": n / statistics.median(t_base),
                     "tokens_per_s_spec": n / statistics.median(t_spec),
                     "speedup": statistics.median(t_base) / statistics.median(t_spec), "mean_al": stats.mean_al,
                     "acceptance_rate": stats.acceptance_rate, "accepted_per_pos": stats.accepted_per_pos})
    return rows


def plot(rows, title, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["tokens_per_s_base"] for r in rows], 0.4, label="no speculation")
    ax.bar([i + 0.2 for i in x], [r["tokens_per_s_spec"] for r in rows], 0.4, label="speculative")
    for i, r in zip(x, rows):
        ax.annotate(f"{r['speedup']:.2f}x\nAL {r['mean_al']:.2f}", (i + 0.2, r["tokens_per_s_spec"]),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), [f"B={r['batch']}" for r in rows])
    ax.set_ylabel("output tokens/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    tmp.replace(path)


@click.command()
@click.option("--target", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Default: demo pair.")
@click.option("--draft", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--drafter", type=click.Choice(["draft_model", "ngram", "eagle3", "dflash", "dspark"]), default="draft_model",
              show_default=True)
@click.option("--draft-len", "draft_len", type=int, default=4, show_default=True)
@click.option("--tree", help="'topk=K,depth=L' instead of a chain.")
@click.option("--batch-sizes", "batch_sizes", default="1,4,16", show_default=True)
@click.option("--max-new-tokens", "max_new_tokens", type=int, default=64, show_default=True)
@click.option("--prompts", "prompt_set", type=click.Choice(["generic", "code"]), default="generic", show_default=True,
              help="generic: 8 short mixed prompts; code: held-out standard-library function prompts.")
@click.option("--num-prompts", "num_prompts", type=int, default=8, show_default=True, help="Size of the code set.")
@click.option("--repeats", type=int, default=3, show_default=True, help="Interleaved timed runs per path; medians.")
@click.option("--clock", type=click.Choice(sorted(CLOCKS)), default="wall", show_default=True,
              help="wall: elapsed time; cpu: process CPU time (fair on a busy shared machine with --threads 1).")
@click.option("--threads", type=int, default=0, show_default=True, help="torch CPU threads (0 = default).")
@click.option("--device", default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG bar chart.")
def main(target, draft, drafter, draft_len, tree, batch_sizes, max_new_tokens, prompt_set, num_prompts, repeats, clock,
         threads, device, as_json, plot_path):
    import torch

    from trtspec.runtime import load_pipeline

    if threads:
        torch.set_num_threads(threads)
    if target is None:
        from trtspec.zoo import demo_pair

        target, demo_drafter = demo_pair(drafter)
        draft = draft or demo_drafter
    sizes = [int(b) for b in batch_sizes.split(",")]
    pipe = load_pipeline(target, draft, drafter=drafter, draft_len=draft_len, tree=tree, device=device)
    prompt_ids = code_prompts(target, num_prompts) if prompt_set == "code" else None
    rows = bench(pipe, sizes, max_new_tokens, repeats, clock, prompt_ids)
    title = (f"{Path(target).name} + {drafter} ({tree or f'D={draft_len}'}), {prompt_set} prompts, {device}, "
             f"{torch.get_num_threads()} threads, {clock} clock")
    if plot_path:
        plot(rows, title, plot_path)
    if as_json:
        click.echo(json.dumps({"target": str(target), "draft": str(draft) if draft else None, "drafter": drafter,
                               "prompts": prompt_set, "draft_len": draft_len, "tree": tree, "device": device, "clock": clock,
                               "threads": torch.get_num_threads(), "rows": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("B", "tok/s plain", "tok/s spec", "speedup", "AL", "accept rate"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["batch"]), f"{r['tokens_per_s_base']:.1f}", f"{r['tokens_per_s_spec']:.1f}",
                      f"{r['speedup']:.2f}x", f"{r['mean_al']:.2f}", f"{r['acceptance_rate']:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
