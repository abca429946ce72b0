"""Shared machinery of the per-op sanitizer drivers ``tools/gpu_check/sanitize_<op>.py``.

Each driver calls one raw op ``torch.ops.trtspec.<op>`` (no Python validation, so bad data reaches
the kernel) over the shapes below, on valid inputs and on the bad-input paths, and checks:

* valid inputs: the device's outputs equal the C++ CPU op's (tree_metadata, verify_greedy,
  accepted_kv_indices), or lie in their documented ranges (the sampled ops, whose float64 sums
  may round differently on the GPU: tests/test_ops_cuda.py checks those statistically); on CUDA
  the allocator's free blocks are poisoned before each call, so an unwritten output element shows;
* bad data: on CUDA the documented "invalid" verdict for the bad request (see the verdict comment
  at the top of each ``cpp/src/*_cuda.cu``), the other requests' outputs unchanged; on CPU a
  RuntimeError from the launcher (the CPU path rejects the same data before running).

Run under compute-sanitizer (``run_sanitizer.py``) this covers every kernel and the invalid-data
branches with memcheck / racecheck / synccheck / initcheck. With ``--device cpu`` the same driver
runs on the CPU ops: a dry run of the driver's own logic where no GPU exists.

Shapes: B in {1, 3, 99}, N (nodes per tree including the root) up to 64, V in {111, 32000, 128256};
every (B, V) pair once, N varied across them (1, 2, 5, 9, 17, 33 = two mask words, 64).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

SIZES = {
    "full": [(1, 1, 111), (1, 17, 32000), (1, 64, 128256), (3, 33, 111), (3, 64, 32000), (3, 9, 128256),
             (99, 64, 111), (99, 5, 32000), (99, 2, 128256)],
    "quick": [(1, 1, 111), (3, 64, 32000), (99, 2, 128256), (99, 33, 111)],
    "smoke": [(1, 1, 111), (3, 5, 111)],
}
KINDS = ("chain", "tree", "star")
POISON = 0x7F  # byte pattern: int32 2139062143, int64 0x7F7F..., float 3.4e38, none of them an op's output
POISON_BLOCKS = (64 * 1024,) * 32 + (4 * 2**20,) * 4  # small-pool and large-pool blocks of the allocator


def parents(g, B: int, N: int, kind: str):
    """int32 [B, N]: a chain, a star (every node a child of the root) or a random tree (each
    node's parent among the previous four nodes, so trees get deep)."""
    import torch

    p = torch.empty(B, N, dtype=torch.int32)
    p[:, 0] = -1
    for i in range(1, N):
        if kind == "chain":
            p[:, i] = i - 1
        elif kind == "star":
            p[:, i] = 0
        else:
            p[:, i] = torch.randint(max(0, i - 4), i, (B,), generator=g, dtype=torch.int32)
    return p


def num_nodes(g, B: int, N: int):
    """int32 [B]: ragged tree sizes in [1, N]."""
    import torch

    return torch.randint(1, N + 1, (B,), generator=g, dtype=torch.int32)


def probs(g, shape, sharpness: float = 2.0):
    """float32 softmax rows of random logits."""
    import torch

    return torch.softmax(torch.randn(*shape, generator=g) * sharpness, -1).contiguous()


def greedy_tokens(g, par, logits, follow: float = 0.7):
    """int64 [B, N]: node i carries its parent's argmax with probability ``follow`` (deep walks)."""
    import torch

    B, N, V = logits.shape
    top = logits.float().argmax(-1)
    tokens = torch.randint(0, V, (B, N), generator=g)
    keep = torch.rand(B, N, generator=g) < follow
    return torch.where(keep, top.gather(1, par.clamp(min=0).long()), tokens)


def check_path(out, par, n_nodes, V: int, rows=None):
    """Invariants of (accepted_len, accepted_nodes, bonus) on valid data: nodes[0] = 0, each next
    accepted node a child of the previous one inside the tree, -1 padding, bonus in [0, V)."""
    acc, nodes, bonus = out
    B, L = nodes.shape
    for b in range(B) if rows is None else rows:
        n, a = int(n_nodes[b]) if n_nodes is not None else par.shape[1], int(acc[b])
        assert 0 <= a < L, f"request {b}: accepted_len {a} outside [0, {L})"
        path = nodes[b].tolist()
        assert path[0] == 0 and all(v == -1 for v in path[a + 1:]), f"request {b}: path {path}"
        for k in range(1, a + 1):
            assert 0 < path[k] < n and int(par[b, path[k]]) == path[k - 1], f"request {b}: path {path}"
        assert 0 <= int(bonus[b]) < V, f"request {b}: bonus {int(bonus[b])} outside [0, {V})"


class Driver:
    """Runs the cases of one op and records failures (an AssertionError or exception per case)."""

    def __init__(self, op: str, device: str, sizes: str, seed: int = 0):
        import torch

        import trtspec.ops  # noqa: F401  (loads trtspec._C: torch.ops.trtspec.*)

        if sizes not in SIZES:
            raise ValueError(f"--sizes must be one of {sorted(SIZES)}, got {sizes!r}")
        if device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, got {device!r}")
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: torch sees no CUDA device")
        self.op, self.device, self.sizes = op, device, sizes
        self.fn = getattr(torch.ops.trtspec, op)
        self.g = torch.Generator().manual_seed(seed)
        self.cases: list[str] = []
        self.failures: list[str] = []
        self.cuda = device == "cuda"

    def shapes(self, distinct_bn: bool = False):
        """(B, N, V) of the size set; with ``distinct_bn`` each (B, N) once (ops without V)."""
        seen, out = set(), []
        for B, N, V in SIZES[self.sizes]:
            if distinct_bn and (B, N) in seen:
                continue
            seen.add((B, N))
            out.append((B, N, V))
        return out

    def dev(self, *tensors):
        out = [t.to(self.device) if hasattr(t, "to") else t for t in tensors]
        return out[0] if len(out) == 1 else out

    def sync(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()  # a kernel fault surfaces here, inside the case that caused it

    @contextmanager
    def case(self, name: str):
        self.cases.append(name)
        try:
            yield
            self.sync()
        except Exception as e:  # noqa: BLE001  (recorded per case; the run goes on to the next case)
            self.failures.append(f"{name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3)

    def poison(self):
        """Fill, then free, blocks of torch's caching allocator with POISON bytes, so that the op's
        outputs (allocated uninitialised by the binding) most likely reuse poisoned memory: an
        element the kernel failed to write then differs from the CPU's output."""
        import torch

        blocks = [torch.empty(n, dtype=torch.uint8, device=self.device) for n in POISON_BLOCKS]
        for b in blocks:
            b.fill_(POISON)
        del blocks

    def call(self, *args):
        """The raw op on ``args`` moved to the device (allocator poisoned first on CUDA); outputs
        back on the CPU."""
        args = [a.to(self.device) if hasattr(a, "to") else a for a in args]
        if self.cuda:
            self.poison()
        out = self.fn(*args)
        return [t.cpu() for t in out]

    def reference(self, *args):
        """The C++ CPU op on ``args`` (the launchers validate, so only valid data goes here)."""
        return list(self.fn(*args))

    @staticmethod
    def same(got, want, what: str = "output"):
        import torch

        for i, (a, b) in enumerate(zip(got, want)):
            assert a.dtype == b.dtype and a.shape == b.shape, f"{what} {i}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
            if not torch.equal(a, b):
                where = torch.nonzero(a != b)[:3].tolist()
                raise AssertionError(f"{what} {i} differs at {where}")

    def bad_data(self, args, bad_rows, verdict, good=None):
        """Run the raw op on bad ``args``. CPU: expect a RuntimeError. CUDA: ``verdict(outputs, b)``
        must hold for each bad request ``b``; the other rows must equal ``good`` (the outputs on
        the valid inputs) where given."""
        if not self.cuda:
            try:
                self.fn(*args)
            except RuntimeError as e:
                assert f"trtspec::{self.op}" in str(e), f"error does not name the op: {e}"
                return
            raise AssertionError("the CPU launcher accepted invalid data")
        out = self.call(*args)
        for b in bad_rows:
            verdict(out, b)
        if good is not None:
            keep = [b for b in range(out[0].shape[0]) if b not in set(bad_rows)]
            self.same([o[keep] for o in out], [o[keep] for o in good], "untouched request")


def main(op: str, run, argv=None) -> int:
    """Command line of a driver: ``--device cpu|cuda --sizes full|quick|smoke [--json PATH]``."""
    ap = argparse.ArgumentParser(description=f"compute-sanitizer driver for trtspec::{op}")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--sizes", default="full", choices=sorted(SIZES))
    ap.add_argument("--json", default=None, help="write {op, cases, failures, seconds} here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    d = Driver(op, args.device, args.sizes)
    run(d)
    seconds = time.perf_counter() - t0
    report = {"op": op, "device": args.device, "sizes": args.sizes, "cases": len(d.cases),
              "failures": d.failures, "seconds": round(seconds, 2)}
    if args.json:
        path = Path(args.json)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    status = "ok" if not d.failures else f"{len(d.failures)} FAILED"
    print(f"sanitize_{op}: {len(d.cases)} cases on {args.device} ({args.sizes}), {status}, {seconds:.1f} s")
    for f in d.failures:
        print(f"  FAIL {f}")
    return 1 if d.failures else 0


if __name__ == "__main__":
    sys.exit("cases.py is a library of the drivers sanitize_<op>.py")
