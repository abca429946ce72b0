"""CUDA section of benchmarks/bench_ops.py: time of each CUDA op, the bandwidth it achieves, and
that bandwidth against a device-to-device copy measured in the same run.

``run_cuda_section(console)`` prints one rich table (or one line saying why it was skipped: no GPU,
or a trtspec._C built without CUDA kernels). Shapes follow the CPU section: B = 64 requests, a
depth-6 tree of 16 nodes and a chain of 8 drafts, V = 32000 and 128256.

Time: the raw ``torch.ops.trtspec`` op (the Python wrappers' validation is not timed), one CUDA
event pair around each launch, the median of ``iters`` launches after ``warmup``. Each launch is
queued behind a short GPU spin (``torch.cuda._sleep``) so that the host's launch cost is not what
the events measure. Inputs rotate over K copies whose total is at least twice the L2 cache (K <= 64);
where even 64 copies fit in twice the L2 (the tiny tree_metadata / accepted_kv_indices inputs) an
L2-sized buffer is rewritten before each launch instead, so every launch reads its inputs from HBM.
Bandwidth: the bytes the op must move divided by that time, where "must move" is
  tree_metadata     parents read + mask, depth, first_child, next_sibling written;
  verify_greedy     the logits rows of the visited nodes (accepted path + 1 per request);
  verify_sample     target and draft rows of the visited nodes (a lower bound: rejections re-read p, q);
  verify_block      the on-path target and draft rows (every row of the block);
  accepted_kv_indices  inputs read + outputs written;
and ``copy_frac`` = that bandwidth / the copy's (a 1 GiB ``copy_``, bytes read + written, median of 20).
With one block per request, B = 64 blocks cannot fill an H200's 132 SMs: expect a fraction well
below 1 at this batch; the table says how far.

Run alone: ``python benchmarks/_cuda_section.py [--quick] [--json PATH] [--device cpu]`` (``cpu``:
the same code on the CPU ops with wall-clock time, a dry run of this module on machines without a GPU).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

SHAPES = {  # name -> parents of one request
    "tree16/d6": [-1, 0, 1, 2, 3, 4, 5, 0, 0, 1, 1, 2, 2, 3, 4, 5],
    "chain8": [-1, 0, 1, 2, 3, 4, 5, 6, 7],
}
VOCABS = (32000, 128256)
BATCH = 64
L2_FALLBACK = 60 * 2**20  # an H200's L2, when the device does not say
SPIN_CYCLES = 100_000     # about 50 us at 2 GHz: longer than the host needs to queue one launch
MAX_COPIES = 64


def _skip_reason():
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU (or torch is a CPU build)"
    try:
        import trtspec.ops  # noqa: F401

        torch.ops.trtspec.tree_metadata(torch.tensor([[-1]], dtype=torch.int32, device="cuda"), None)
    except RuntimeError as e:
        if "no CUDA kernels" in str(e):
            return "trtspec._C was built without CUDA kernels"
        raise
    return None


def l2_bytes(device) -> int:
    import torch

    if torch.device(device).type != "cuda":
        return 0
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or L2_FALLBACK)


class Timer:
    """Median milliseconds of ``fn(*inputs)`` over ``iters`` launches (see the module docstring)."""

    def __init__(self, device: str = "cuda", warmup: int = 3, iters: int = 50):
        import torch

        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.warmup, self.iters = warmup, iters
        self.l2 = l2_bytes(self.device)
        self.flush = torch.empty(2 * self.l2 // 4, dtype=torch.int32, device=self.device) if self.cuda else None

    def copies(self, inputs: tuple, nbytes: int) -> tuple[list[tuple], bool]:
        """(input sets to rotate over, whether to flush the L2 before each launch)."""
        if not self.cuda:
            return [inputs], False
        k = min(MAX_COPIES, max(2, math.ceil(2 * self.l2 / max(nbytes, 1))))
        sets = [inputs] + [tuple(t.clone() if hasattr(t, "clone") else t for t in inputs) for _ in range(k - 1)]
        return sets, k * nbytes < 2 * self.l2

    def ms(self, fn, inputs: tuple, nbytes: int) -> dict:
        """{"ms", "copies", "flush"} for ``fn`` over rotated copies of ``inputs`` (``nbytes`` each)."""
        import torch

        sets, flush = self.copies(inputs, nbytes)
        for i in range(self.warmup):
            fn(*sets[i % len(sets)])
        if not self.cuda:  # wall clock: a dry run of this module on CPU tensors
            times = []
            for i in range(self.iters):
                t0 = time.perf_counter()
                fn(*sets[i % len(sets)])
                times.append((time.perf_counter() - t0) * 1e3)
            return {"ms": statistics.median(times), "copies": 1, "flush": False}
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.iters)]
        torch.cuda.synchronize()
        for i, (start, end) in enumerate(events):
            if flush:
                self.flush.add_(1)
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            fn(*sets[i % len(sets)])
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in events]
        return {"ms": statistics.median(times), "copies": len(sets), "flush": flush}


def copy_gbps(device: str = "cuda", nbytes: int = 2**30, iters: int = 20) -> dict:
    """Device-to-device ``copy_`` of ``nbytes``: {"bytes", "ms", "gbps"} counting bytes read + written."""
    import torch

    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    timer = Timer(device, warmup=3, iters=iters)
    ms = timer.ms(lambda a, b: b.copy_(a), (src, dst), 2 * nbytes)["ms"]  # 2 GiB a set: two sets rotate
    return {"bytes": 2 * nbytes, "ms": ms, "gbps": 2 * nbytes / (ms * 1e6)}


def _inputs(parents_row, V, g, batch):
    """Greedy-friendly tokens (children mostly carry the parent's argmax) and sampling inputs."""
    import torch

    B, N = batch, len(parents_row)
    parents = torch.tensor(parents_row, dtype=torch.int32).repeat(B, 1)
    logits = torch.randn(B, N, V, generator=g)
    top = logits.argmax(-1)
    tokens = torch.randint(0, V, (B, N), generator=g)
    follow = torch.rand(B, N, generator=g) < 0.7
    tokens = torch.where(follow, top.gather(1, parents.clamp(min=0).long()), tokens)
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits + torch.randn(B, N, V, generator=g), -1)
    return tokens, parents, logits, target, draft


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "numel"))


def measure(warmup: int = 3, iters: int = 50, device: str = "cuda", vocabs=VOCABS, batch: int = BATCH,
            copy: dict | None = None) -> list[dict]:
    """Rows {op, shape, V, ms, bytes, gbps, copy_frac, copies, flush} for every op, shape and
    vocabulary (``device="cpu"``: the same code on the CPU ops, wall clock, copy_frac None)."""
    import torch

    import trtspec.ops  # noqa: F401  (loads trtspec._C, which registers torch.ops.trtspec)

    ops = torch.ops.trtspec
    dev = torch.device(device)
    timer = Timer(device, warmup, iters)
    copy_rate = copy["gbps"] if copy else None
    g = torch.Generator().manual_seed(0)
    rows = []

    def add(op, shape, V, fn, inputs, nbytes):
        t = timer.ms(fn, inputs, _nbytes(*inputs))
        gbps = nbytes / (t["ms"] * 1e6)
        rows.append({"op": op, "shape": shape, "V": V, "ms": t["ms"], "bytes": nbytes, "gbps": gbps,
                     "copy_frac": gbps / copy_rate if copy_rate else None, "copies": t["copies"], "flush": t["flush"]})

    for shape, parents_row in SHAPES.items():
        N = len(parents_row)
        W = (N + 31) // 32
        for V in vocabs:
            tokens, parents, logits, target, draft = (t.to(dev) for t in _inputs(parents_row, V, g, batch))
            B = batch
            if V == vocabs[0]:
                add("tree_metadata", shape, "-", lambda p: ops.tree_metadata(p, None), (parents,),
                    B * N * 4 + B * N * (W + 3) * 4)
            for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
                lg = logits.to(dtype)
                acc_len, acc_nodes, _ = ops.verify_greedy(tokens, parents, lg, None, None)
                visited = int(acc_len.sum()) + B
                add(f"verify_greedy {label}", shape, V,
                    lambda t, p, x: ops.verify_greedy(t, p, x, None, None), (tokens, parents, lg),
                    visited * V * lg.element_size())
                del lg
            # the sampled ops' layout: draft j = node j + 1, its row the distribution it was drawn from
            drafts = tokens[:, 1:].contiguous()
            draft_rows = draft[:, parents[0, 1:].long()].contiguous()
            seed = torch.arange(B, dtype=torch.int64, device=dev)        # a random stream per request
            offset = torch.full((B,), 2, dtype=torch.int64, device=dev)
            sample_len, _, _ = ops.verify_sample(drafts, parents, target, draft_rows, seed, offset, False, None, None)
            visited = int(sample_len.sum()) + B
            add("verify_sample", shape, V,
                lambda x, p, a, q, s, o: ops.verify_sample(x, p, a, q, s, o, False, None, None),
                (drafts, parents, target, draft_rows, seed, offset), visited * V * 4 * 2)
            if shape.startswith("chain"):
                D = N - 1
                add("verify_block", shape, V, lambda x, a, q, s, o: ops.verify_block(x, a, q, s, o, None),
                    (drafts, target, draft_rows, seed, offset), (2 * D + 1) * B * V * 4)
            del draft_rows
            if V == vocabs[0]:
                cache = torch.randint(0, 4096, (B,), dtype=torch.int32, device=dev)
                L = acc_nodes.shape[1]
                add("accepted_kv_indices", shape, "-", lambda n, a, c: ops.accepted_kv_indices(n, a, c),
                    (acc_nodes, acc_len, cache), B * L * 4 * 3 + B * 4 * 3)
            del tokens, parents, logits, target, draft
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], copy: dict | None, title: str):
    from rich.table import Table

    head = f" (copy: {copy['gbps']:.0f} GB/s)" if copy else ""
    t = Table(title=title + head)
    for col in ("op", "shape", "V", "time (us)", "bytes (MB)", "GB/s", "of copy", "inputs"):
        t.add_column(col, justify="left" if col in ("op", "shape", "inputs") else "right")
    for r in rows:
        frac = "-" if r["copy_frac"] is None else f"{100 * r['copy_frac']:.0f}%"
        inputs = "L2 flushed" if r["flush"] else f"{r['copies']} copies"
        t.add_row(r["op"], r["shape"], str(r["V"]), f"{r['ms'] * 1e3:.1f}", f"{r['bytes'] / 1e6:.2f}",
                  f"{r['gbps']:.0f}", frac, inputs)
    return t


def run_cuda_section(console, quick: bool = False) -> list[dict]:
    """Print the CUDA table on a rich ``console``; returns its rows ([] when skipped)."""
    reason = _skip_reason()
    if reason:
        console.print(f"[yellow]CUDA section skipped: {reason}[/yellow]")
        return []
    import torch

    iters = 20 if quick else 50
    copy = copy_gbps()
    rows = measure(iters=iters, copy=copy)
    console.print(table(rows, copy, f"trtspec CUDA ops on {torch.cuda.get_device_name()} (B={BATCH}, median of {iters})"))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20 launches per point instead of 50")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a dry run on the CPU ops (tiny shapes, wall clock)")
    ap.add_argument("--json", default=None, help="also write {device, copy, rows} to this file")
    args = ap.parse_args(argv)
    from rich.console import Console

    console = Console(width=132)
    if args.device == "cpu":
        copy, rows = None, measure(warmup=1, iters=2, device="cpu", vocabs=(111,), batch=4)
        console.print(table(rows, None, "trtspec ops on CPU (dry run of the CUDA section: B=4, V=111, wall clock)"))
        name = "cpu"
    else:
        reason = _skip_reason()
        if reason:
            console.print(f"[yellow]CUDA section skipped: {reason}[/yellow]")
            return 2
        import torch

        iters = 20 if args.quick else 50
        copy = copy_gbps()
        rows = measure(iters=iters, copy=copy)
        name = torch.cuda.get_device_name()
        console.print(table(rows, copy, f"trtspec CUDA ops on {name} (B={BATCH}, median of {iters})"))
    if args.json:
        path = Path(args.json)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"device": name, "copy": copy, "rows": rows}, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
