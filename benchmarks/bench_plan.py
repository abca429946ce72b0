"""Time a full plan: 10 batch sizes x D in 0..16 x 3 drafters (target: under one second on one CPU core).

    python benchmarks/bench_plan.py [--model llama-3.1-70b] [--gpu h200] [--repeat 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

from trtspec.recipes.api import build_request
from trtspec.recipes.optimizer import DEFAULT_BATCHES, plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    req = build_request(model=args.model, gpu=args.gpu, quant="fp8", drafters="eagle3,dflash,ngram",
                        acceptance={"eagle3": "rates=0.8,0.75,0.7", "dflash": "rates=0.85,0.8,0.75,0.7",
                                    "ngram": "rates=0.5,0.4"},
                        batches=DEFAULT_BATCHES, max_draft_len=16, context=4096)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = plan(req)
        times.append(time.perf_counter() - t0)
    out = {"model": args.model, "gpu": args.gpu, "batches": len(DEFAULT_BATCHES), "draft_lens": 17, "drafters": 3,
           "evaluations": len(DEFAULT_BATCHES) * 17 * 3, "median_s": statistics.median(times), "min_s": min(times),
           "chosen": {r.batch: (r.drafter, r.draft_len) for r in result.rows}}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"full plan ({out['evaluations']} configurations): median {out['median_s'] * 1e3:.1f} ms, "
              f"min {out['min_s'] * 1e3:.1f} ms over {args.repeat} runs -> "
              f"{'OK' if out['median_s'] < 1.0 else 'SLOW'} (< 1 s)")


if __name__ == "__main__":
    main()
