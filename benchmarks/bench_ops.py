"""Speed of the trtspec ops: C++ CPU kernels against the pure-torch reference, side by side.

For each op, shape and vocabulary size (defaults: B = 64 requests, a depth-6 tree of 16 nodes
and a chain of 8 drafts, V = 32000 and 128256) it prints, from one run:

* ``reference ms``: :mod:`trtspec.reference` (Python loops over requests and nodes);
* ``op ms``: the :mod:`trtspec.ops` wrapper, argument validation included (for the sampling ops
  that is one pass over each probability tensor);
* ``kernel ms``: the raw ``torch.ops.trtspec.*`` call (the C++ checks only);
* the speed-ups ``reference / op`` and ``reference / kernel``, and whether the outputs were equal.

Times are the minimum over repeats of the wall clock (robust on a shared machine). Inputs are
seeded; drafts are drawn from the draft distribution, whose logits share most of the target's,
so walks go several nodes deep. A CUDA section (``benchmarks/_cuda_section.py``) follows when a
GPU and a CUDA build of ``trtspec._C`` exist, and says why it is skipped otherwise.

Usage: ``python benchmarks/bench_ops.py [--batch 64] [--vocab 32000 128256] [--repeats 5]
[--ref-repeats 1] [--json]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SHAPES = {  # name -> parents of one request (same shapes as the CUDA section)
    "tree16/d6": [-1, 0, 1, 2, 3, 4, 5, 0, 0, 1, 1, 2, 2, 3, 4, 5],
    "chain8": [-1, 0, 1, 2, 3, 4, 5, 6, 7],
}


def _best_ms(fn, repeats: int) -> tuple[float, object]:
    out, best = None, float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best, out


def _equal(a, b) -> bool:
    import torch

    return all(torch.equal(x, y) for x, y in zip(a, b))


def _inputs(B: int, V: int, seed: int = 0):
    """Inputs for the largest shape (N = 16); smaller shapes slice them."""
    import torch

    g = torch.Generator().manual_seed(seed)
    N = max(len(p) for p in SHAPES.values())
    logits = torch.randn(B, N, V, generator=g).mul_(3.0)
    target = logits + torch.randn(B, N, V, generator=g).mul_(0.7)
    target = torch.softmax(target, -1)
    draft = logits + torch.randn(B, N, V, generator=g).mul_(0.7)
    draft = torch.softmax(draft, -1)
    return logits, target, draft, g


def _shape_inputs(name, B, logits, target, draft, g):
    import torch

    parents = torch.tensor(SHAPES[name], dtype=torch.int32).repeat(B, 1)
    N = parents.shape[1]
    logits, target, draft = (t[:, :N].contiguous() for t in (logits, target, draft))
    rows = torch.arange(B)
    best = logits.argmax(-1)
    greedy_tokens = torch.randint(0, logits.shape[-1], (B, N), generator=g)
    sample_tokens = torch.zeros(B, N - 1, dtype=torch.int64)   # the sampled ops' layout: draft j = node j + 1
    for i in range(1, N):  # greedy: the target's argmax with probability 0.8; sample: drawn from q
        u = parents[:, i].long()
        hit = torch.rand(B, generator=g) < 0.8
        greedy_tokens[:, i] = torch.where(hit, best[rows, u], greedy_tokens[:, i])
        sample_tokens[:, i - 1] = torch.multinomial(draft[rows, u], 1, generator=g).squeeze(1)
    draft = draft[:, parents[0, 1:].long()].contiguous()        # row j: the distribution draft j was drawn from
    return parents, logits, target, draft, greedy_tokens, sample_tokens


def measure(batch: int = 64, vocabs=(32000, 128256), repeats: int = 5, ref_repeats: int = 1, progress=None) -> list[dict]:
    """Rows of {op, shape, V, reference_ms, op_ms, kernel_ms, speedup_op, speedup_kernel, equal}."""
    import torch

    from trtspec import ops, reference

    rows = []

    def add(op, shape, V, ref_fn, op_fn, kernel_fn):
        ref_ms, ref_out = _best_ms(ref_fn, ref_repeats)
        op_ms, op_out = _best_ms(op_fn, repeats)
        kernel_ms, _ = _best_ms(kernel_fn, repeats)
        rows.append(dict(op=op, shape=shape, V=V, reference_ms=ref_ms, op_ms=op_ms, kernel_ms=kernel_ms,
                         speedup_op=ref_ms / op_ms, speedup_kernel=ref_ms / kernel_ms,
                         equal=_equal(op_out, ref_out)))
        if progress:
            progress()

    K = torch.ops.trtspec
    for name, parents_row in SHAPES.items():  # vocabulary-free ops
        parents = torch.tensor(parents_row, dtype=torch.int32).repeat(batch, 1)
        add("tree_metadata", name, None, lambda: reference.tree_metadata(parents), lambda: ops.tree_metadata(parents),
            lambda: K.tree_metadata(parents))
        L = len(parents_row)
        nodes = torch.arange(L, dtype=torch.int32).repeat(batch, 1)
        length = torch.randint(0, L, (batch,), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
        nodes = torch.where(nodes <= length[:, None], nodes, -1).to(torch.int32)
        cache = torch.arange(batch, dtype=torch.int32) * 1000
        add("accepted_kv_indices", name, None, lambda: reference.accepted_kv_indices(nodes, length, cache),
            lambda: ops.accepted_kv_indices(nodes, length, cache), lambda: K.accepted_kv_indices(nodes, length, cache))

    seed = torch.arange(batch, dtype=torch.int64) * 7919           # a random stream per request
    offset = torch.zeros(batch, dtype=torch.int64)
    for V in vocabs:
        logits_all, target_all, draft_all, g = _inputs(batch, V)
        for name in SHAPES:
            parents, logits, target, draft, gtok, stok = _shape_inputs(name, batch, logits_all, target_all, draft_all, g)
            half = logits.to(torch.bfloat16)
            add("verify_greedy fp32", name, V, lambda: reference.verify_greedy(gtok, parents, logits),
                lambda: ops.verify_greedy(gtok, parents, logits), lambda: K.verify_greedy(gtok, parents, logits))
            add("verify_greedy bf16", name, V, lambda: reference.verify_greedy(gtok, parents, half),
                lambda: ops.verify_greedy(gtok, parents, half), lambda: K.verify_greedy(gtok, parents, half))
            for wor in (False, True):
                label = "verify_sample" + (" w/o repl." if wor else "")
                add(label, name, V, lambda: reference.verify_sample(stok, parents, target, draft, seed, offset, wor),
                    lambda: ops.verify_sample(stok, parents, target, draft, seed, offset, wor),
                    lambda: K.verify_sample(stok, parents, target, draft, seed, offset, wor))
            if name.startswith("chain"):  # the same tensors as verify_sample's
                add("verify_block", name, V, lambda: reference.verify_block(stok, target, draft, seed, offset),
                    lambda: ops.verify_block(stok, target, draft, seed, offset),
                    lambda: K.verify_block(stok, target, draft, seed, offset))
            del parents, logits, target, draft, half
        del logits_all, target_all, draft_all
    return rows


def _print_table(console, rows, batch):
    from rich.table import Table

    table = Table(title=f"trtspec ops on CPU, B={batch}: C++ kernel vs pure-torch reference (min wall ms)")
    for col in ("op", "shape", "V", "reference ms", "op ms", "kernel ms", "ref/op", "ref/kernel", "equal"):
        table.add_column(col, justify="left" if col in ("op", "shape") else "right")
    for r in rows:
        table.add_row(r["op"], r["shape"], "-" if r["V"] is None else str(r["V"]), f"{r['reference_ms']:.2f}",
                      f"{r['op_ms']:.2f}", f"{r['kernel_ms']:.2f}", f"{r['speedup_op']:.1f}x",
                      f"{r['speedup_kernel']:.1f}x", "yes" if r["equal"] else "[red]NO[/red]")
    console.print(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="requests per call (default 64)")
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 128256], help="vocabulary sizes")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of the C++ op (default 5)")
    parser.add_argument("--ref-repeats", type=int, default=1, help="timed calls of the reference (default 1)")
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA section")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.ref_repeats < 1 or any(v < 1 for v in args.vocab):
        parser.error("--batch, --repeats, --ref-repeats and --vocab must be positive")

    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=args.json, width=None if sys.stdout.isatty() else 132)
    total = 4 + len(args.vocab) * (4 * len(SHAPES) + 1)
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("timing ops", total=total)
        rows = measure(args.batch, tuple(args.vocab), args.repeats, args.ref_repeats,
                       progress=lambda: bar.advance(task))
    cuda_rows = []
    if not args.no_cuda:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _cuda_section import run_cuda_section

        cuda_rows = run_cuda_section(Console(stderr=True) if args.json else console)
    if args.json:
        print(json.dumps({"batch": args.batch, "cpu": rows, "cuda": cuda_rows}, indent=2))
    else:
        _print_table(console, rows, args.batch)
    return 0 if all(r["equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
