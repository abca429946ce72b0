"""CUDA section of benchmarks/bench_ops.py: time of each CUDA op and the bandwidth it achieves.

``run_cuda_section(console)`` prints one rich table (or one line saying why it was skipped: no GPU,
or a trtspec._C built without CUDA kernels). Shapes follow the CPU section: B = 64 requests, a
depth-6 tree of 16 nodes and a chain of 8 drafts, V = 32000 and 128256.

Time: median of ``iters`` launches measured with CUDA events on the current stream, after warm-up;
the raw ``torch.ops.trtspec`` ops are timed (the Python wrappers' validation is not).
Bandwidth: the bytes the op must move divided by that time, where "must move" is
  tree_metadata     parents read + mask, depth, first_child, next_sibling written;
  verify_greedy     the logits rows of the visited nodes (accepted path + 1 per request);
  verify_sample     target and draft rows of the visited nodes (a lower bound: rejections re-read p, q);
  verify_block      the on-path target and draft rows (every row of the block);
  accepted_kv_indices  inputs read + outputs written.
Run alone: ``python benchmarks/_cuda_section.py``.
"""
from __future__ import annotations

import statistics

SHAPES = {  # name -> parents of one request
    "tree16/d6": [-1, 0, 1, 2, 3, 4, 5, 0, 0, 1, 1, 2, 2, 3, 4, 5],
    "chain8": [-1, 0, 1, 2, 3, 4, 5, 6, 7],
}
VOCABS = (32000, 128256)
BATCH = 64


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


def _time_ms(fn, warmup: int, iters: int, cuda: bool = True) -> float:
    import time

    import torch

    for _ in range(warmup):
        fn()
    if not cuda:  # wall clock (a dry run of this module on CPU tensors)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _inputs(parents_row, V, g):
    """Greedy-friendly tokens (children mostly carry the parent's argmax) and sampling inputs."""
    import torch

    B, N = BATCH, len(parents_row)
    parents = torch.tensor(parents_row, dtype=torch.int32).repeat(B, 1)
    logits = torch.randn(B, N, V, generator=g)
    top = logits.argmax(-1)
    tokens = torch.randint(0, V, (B, N), generator=g)
    follow = torch.rand(B, N, generator=g) < 0.7
    tokens = torch.where(follow, top.gather(1, parents.clamp(min=0).long()), tokens)
    target = torch.softmax(logits, -1)
    draft = torch.softmax(logits + torch.randn(B, N, V, generator=g), -1)
    return tokens, parents, logits, target, draft


def measure(warmup: int = 3, iters: int = 20, device: str = "cuda") -> list[dict]:
    """Rows {op, shape, V, ms, bytes, gbps} for every op, shape and vocabulary (needs a CUDA build;
    ``device="cpu"`` runs the same code on the CPU ops, a dry run of this module)."""
    import functools

    import torch

    import trtspec.ops  # noqa: F401  (loads trtspec._C, which registers torch.ops.trtspec)

    ops = torch.ops.trtspec
    dev = torch.device(device)
    timer = functools.partial(_time_ms, cuda=dev.type == "cuda")
    g = torch.Generator().manual_seed(0)
    rows = []

    def add(op, shape, V, ms, nbytes):
        rows.append({"op": op, "shape": shape, "V": V, "ms": ms, "bytes": nbytes, "gbps": nbytes / (ms * 1e6)})

    for shape, parents_row in SHAPES.items():
        N = len(parents_row)
        W = (N + 31) // 32
        for V in VOCABS:
            tokens, parents, logits, target, draft = (t.to(dev) for t in _inputs(parents_row, V, g))
            B = BATCH
            if V == VOCABS[0]:
                add("tree_metadata", shape, "-", timer(lambda: ops.tree_metadata(parents, None), warmup, iters),
                    B * N * 4 + B * N * (W + 3) * 4)
            for dtype in (torch.float32, torch.bfloat16):
                lg = logits.to(dtype)
                acc_len, acc_nodes, _ = ops.verify_greedy(tokens, parents, lg, None, None)
                visited = int(acc_len.sum()) + B
                add(f"verify_greedy[{str(dtype).split('.')[-1]}]", shape, V,
                    timer(lambda: ops.verify_greedy(tokens, parents, lg, None, None), warmup, iters),
                    visited * V * lg.element_size())
            # the sampled ops' layout: draft j = node j + 1, its row the distribution it was drawn from
            drafts = tokens[:, 1:].contiguous()
            draft_rows = draft[:, parents[0, 1:].long()].contiguous()
            seed = torch.arange(B, dtype=torch.int64, device=dev)        # a random stream per request
            offset = torch.full((B,), 2, dtype=torch.int64, device=dev)
            sample_len, _, _ = ops.verify_sample(drafts, parents, target, draft_rows, seed, offset, False, None, None)
            visited = int(sample_len.sum()) + B
            add("verify_sample", shape, V,
                timer(lambda: ops.verify_sample(drafts, parents, target, draft_rows, seed, offset, False, None, None),
                         warmup, iters), visited * V * 4 * 2)
            if shape.startswith("chain"):
                D = N - 1
                add("verify_block", shape, V,
                    timer(lambda: ops.verify_block(drafts, target, draft_rows, seed, offset, None), warmup, iters),
                    (2 * D + 1) * B * V * 4)
            if V == VOCABS[0]:
                cache = torch.randint(0, 4096, (B,), dtype=torch.int32, device=dev)
                L = acc_nodes.shape[1]
                add("accepted_kv_indices", shape, "-",
                    timer(lambda: ops.accepted_kv_indices(acc_nodes, acc_len, cache), warmup, iters),
                    B * L * 4 * 3 + B * 4 * 3)
    return rows


def run_cuda_section(console) -> list[dict]:
    """Print the CUDA table on a rich ``console``; returns its rows ([] when skipped)."""
    reason = _skip_reason()
    if reason:
        console.print(f"[yellow]CUDA section skipped: {reason}[/yellow]")
        return []
    import torch
    from rich.table import Table

    rows = measure()
    table = Table(title=f"trtspec CUDA ops on {torch.cuda.get_device_name()} (B={BATCH}, median of 20)")
    for col in ("op", "shape", "V", "time (us)", "bytes (MB)", "GB/s"):
        table.add_column(col, justify="left" if col in ("op", "shape") else "right")
    for r in rows:
        table.add_row(r["op"], r["shape"], str(r["V"]), f"{r['ms'] * 1e3:.1f}", f"{r['bytes'] / 1e6:.2f}",
                      f"{r['gbps']:.0f}")
    console.print(table)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    run_cuda_section(Console())
