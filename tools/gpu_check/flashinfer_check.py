"""FlashInfer's ``chain_speculative_sampling`` beside trtspec's chain verifiers, on the same inputs.

Optional: needs an importable ``flashinfer`` (carried as a wheel) whose sampling kernels load or
JIT-compile on this machine; otherwise the result is ``skipped`` with the reason. Inputs: B = 64
requests, a chain of D = 8 drafts drawn from their draft rows, V = 32000 and 128256, float32
(FlashInfer's layout: draft_probs [B, D, V], draft_token_ids [B, D] int32, target_probs
[B, D + 1, V]), which is also the layout of trtspec's verify_sample (with chain parents) and
verify_block, each request with its own stream (seed[b], offset[b]). Timing: benchmarks/_cuda_section.py's Timer (CUDA events, rotated inputs).
Also reported: the mean number of accepted drafts of each (FlashInfer's emitted drafts; the same
algorithm as verify_sample, so those two means agree up to sampling noise).

    python3 tools/gpu_check/flashinfer_check.py [--quick] [--results DIR] [--json PATH]
"""
from __future__ import annotations

import argparse
import inspect
import json
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "benchmarks"))

from result import write_result  # noqa: E402

B, D = 64, 8


def load():
    """(chain_speculative_sampling, flashinfer version) or raise ImportError with the reason."""
    try:
        import flashinfer
        from flashinfer.sampling import chain_speculative_sampling
    except Exception as e:  # noqa: BLE001  (any import failure is a reason to skip this optional check)
        raise ImportError(f"flashinfer not importable ({type(e).__name__}: {e})") from e
    return chain_speculative_sampling, getattr(flashinfer, "__version__", "?")


def flashinfer_call(fn):
    """A function (draft_probs, draft_ids, target_probs) -> (tokens, accepted, emitted) for the
    installed version's signature (older ones take uniform_samples [B, D + 1] as third argument)."""
    import torch

    params = inspect.signature(fn).parameters
    if "uniform_samples" in params:
        def call(q, x, p):
            u = torch.rand(q.shape[0], q.shape[1] + 1, device=q.device)
            return fn(q, x, u, p)
        return call
    return lambda q, x, p: fn(q, x, p)


def emitted_drafts(out) -> float:
    """Mean accepted drafts from FlashInfer's output token ids [B, D + 1] (the accepted drafts and
    the bonus, -1 padded; the first element when it returns a tuple): what trtspec's accepted_len counts."""
    ids = out[0] if isinstance(out, (tuple, list)) else out
    return float(((ids >= 0).sum(1) - 1).float().mean())


def inputs(V: int, g):
    import torch

    base = torch.randn(B, D + 1, V, generator=g) * 2
    target = torch.softmax(base + 0.5 * torch.randn(B, D + 1, V, generator=g), -1)
    draft = torch.softmax(base[:, :D] + 0.5 * torch.randn(B, D, V, generator=g), -1)
    x = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(B, D)
    return x, target.contiguous(), draft.contiguous()


def run(quick: bool) -> dict:
    import torch
    from _cuda_section import Timer

    import trtspec.ops  # noqa: F401

    fn, version = load()
    call = flashinfer_call(fn)
    ops = torch.ops.trtspec
    timer = Timer("cuda", warmup=3, iters=20 if quick else 50)
    g = torch.Generator().manual_seed(0)
    parents = torch.arange(-1, D, dtype=torch.int32).repeat(B, 1).cuda()
    rows = []
    for V in ((128256,) if quick else (32000, 128256)):
        x, target, draft = (t.cuda() for t in inputs(V, g))
        x32 = x.to(torch.int32)
        seed = torch.arange(B, dtype=torch.int64, device="cuda")
        offset = torch.zeros(B, dtype=torch.int64, device="cuda")
        t0 = time.perf_counter()
        fi_out = call(draft, x32, target)  # first call: loads or JIT-compiles the kernels
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        sample_out = ops.verify_sample(x, parents, target, draft, seed, offset, False, None, None)
        block_out = ops.verify_block(x, target, draft, seed, offset, None)
        nbytes = lambda *ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        row = {
            "V": V, "flashinfer_first_call_s": first_s,
            "flashinfer_us": 1e3 * timer.ms(call, (draft, x32, target), nbytes(draft, x32, target))["ms"],
            "verify_sample_us": 1e3 * timer.ms(
                lambda t, p, a, q, s, o: ops.verify_sample(t, p, a, q, s, o, False, None, None),
                (x, parents, target, draft, seed, offset), nbytes(x, parents, target, draft))["ms"],
            "verify_block_us": 1e3 * timer.ms(lambda t, a, q, s, o: ops.verify_block(t, a, q, s, o, None),
                                              (x, target, draft, seed, offset), nbytes(x, target, draft))["ms"],
            "flashinfer_mean_accepted": emitted_drafts(fi_out),
            "verify_sample_mean_accepted": float(sample_out[0].float().mean()),
            "verify_block_mean_accepted": float(block_out[0].float().mean()),
        }
        rows.append(row)
        del x, target, draft
        torch.cuda.empty_cache()
    return {"flashinfer": version, "batch": B, "draft_len": D, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="V = 128256 only, 20 launches")
    ap.add_argument("--results", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--limit", type=int, default=0,
                    help="seconds after which the (optional) check gives up as skipped, e.g. a slow JIT build")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()

    def give_up(signum, frame):
        raise TimeoutError(f"flashinfer did not load and run within {args.limit} s")

    if args.limit > 0:
        signal.signal(signal.SIGALRM, give_up)
        signal.alarm(args.limit)
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("no GPU")
        out = run(args.quick)
    except (ImportError, TimeoutError) as e:
        status, figure, out = f"skipped: {e}", "-", {}
    except Exception as e:  # noqa: BLE001  (JIT or kernel failure of an optional third-party library)
        status, figure, out = f"skipped: flashinfer failed here ({type(e).__name__}: {str(e)[:200]})", "-", {}
    else:
        signal.alarm(0)
        r = out["rows"][-1]
        status = "pass"
        figure = (f"B={B} D={D} V={r['V']}: flashinfer {r['flashinfer_us']:.1f} us, verify_sample "
                  f"{r['verify_sample_us']:.1f} us, verify_block {r['verify_block_us']:.1f} us; mean accepted "
                  f"{r['flashinfer_mean_accepted']:.2f} / {r['verify_sample_mean_accepted']:.2f} / "
                  f"{r['verify_block_mean_accepted']:.2f} (flashinfer {out['flashinfer']})")
    if args.json and out:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.results:
        write_result(args.results, "timing.flashinfer", status, figure, out, time.perf_counter() - t0)
    print(f"timing.flashinfer: {status}: {figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
