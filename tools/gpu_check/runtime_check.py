"""The reference runtime on a device against the CPU: greedy output equal token for token.

The demo pair (trtspec/zoo/demo) generates ``--tokens`` greedy tokens for each prompt on the CPU
with plain decoding (the reference), then on ``--device`` with plain decoding, the draft model
(chain D=4 and a top-2 depth-3 tree), the EAGLE-3 head (D=3) and n-gram drafting (D=3). Greedy
speculative decoding is lossless, so every configuration must reproduce the CPU's tokens exactly.
float32 everywhere and TF32 off, so the only differences left are the order of float32 sums in
the device's matrix products; where a configuration differs, the result names the first differing
position and the CPU target's top-2 logit gap there (a gap near 0 is a rounding tie, a large one
a bug). One sampled run (verify=sample, temperature 1) also runs on the device and must produce
in-vocabulary tokens.

    python3 tools/gpu_check/runtime_check.py [--device cuda] [--tokens 48] [--quick] [--results DIR] [--json PATH]

``--device cpu`` compares the CPU with itself: a dry run of this script where no GPU exists.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from result import write_result  # noqa: E402

PROMPTS = [
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "class Stack:\n    def __init__(self):\n",
    "for i in range(10):\n    ",
]
# name -> load_pipeline keywords (the drafter's weights are the demo's for that drafter)
CONFIGS = {
    "plain": dict(drafter="draft_model", draft=False, draft_len=0),
    "draft_model D=4": dict(drafter="draft_model", draft_len=4),
    "draft_model tree topk=2,depth=3": dict(drafter="draft_model", tree="topk=2,depth=3"),
    "eagle3 D=3": dict(drafter="eagle3", draft_len=3),
    "ngram D=3": dict(drafter="ngram", draft=False, draft_len=3),
}
QUICK = ("plain", "draft_model D=4", "eagle3 D=3")


@functools.lru_cache(maxsize=None)
def _pipeline(name: str, device: str):
    """The demo pair loaded for configuration ``name`` (cached: the CPU reference is reused)."""
    import torch

    from trtspec.runtime import load_pipeline
    from trtspec.zoo import demo_pair

    kw = dict(CONFIGS[name])
    drafter = kw.pop("drafter")
    want_draft = kw.pop("draft", True)
    target, draft = demo_pair(drafter if drafter != "ngram" else "draft_model")
    return load_pipeline(target, draft if want_draft else None, drafter=drafter, device=device,
                         dtype=torch.float32, **kw)


def top2(pipe, ids: list[int]) -> tuple[int, float]:
    """(argmax, top-1 minus top-2 logit) of the target after ``ids`` (one plain forward on the
    pipeline's device)."""
    import torch

    model = pipe.target
    dev = model.lm_head.weight.device
    T = len(ids)
    cache = model.new_cache(1, T)
    tok = torch.tensor([ids], device=dev)
    pos = torch.arange(T, device=dev)[None]
    mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()[None]  # causal
    with torch.inference_mode():
        hidden, _ = model(tok, pos, cache, torch.zeros(1, dtype=torch.long, device=dev), pos, mask)
        top = model.logits(hidden)[0, -1].float().topk(2)
    return int(top.indices[0]), float(top.values[0] - top.values[1])


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run(device: str, tokens: int, configs, prompts) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    t0 = time.perf_counter()
    ref_pipe = _pipeline("plain", "cpu")
    prompt_ids = [ref_pipe.tokenizer.encode(p) for p in prompts]
    reference = [t for t, _ in ref_pipe.generate_ids(prompt_ids, max_new_tokens=tokens)]
    # the forward behind the reported gaps must reproduce the reference's own last token
    last, _ = top2(ref_pipe, prompt_ids[0] + reference[0][:-1])
    if last != reference[0][-1]:
        raise AssertionError(f"top2(): plain forward predicts {last}, greedy decoding produced {reference[0][-1]}")
    out = {"device": device, "tokens": tokens, "prompts": len(prompts), "configs": {}}
    for name in configs:
        pipe = _pipeline(name, device)
        got = [t for t, _ in pipe.generate_ids(prompt_ids, max_new_tokens=tokens)]
        stats = pipe.last_stats
        diffs = []
        for j, (g, r) in enumerate(zip(got, reference)):
            k = first_difference(g, r)
            if k is not None:
                gap = top2(ref_pipe, prompt_ids[j] + r[:k])[1] if k < len(r) else None
                diffs.append({"prompt": j, "position": k, "device_token": g[k] if k < len(g) else None,
                              "cpu_token": r[k] if k < len(r) else None, "cpu_top2_gap": gap})
        out["configs"][name] = {"equal": not diffs, "differences": diffs,
                                "mean_al": stats.mean_al}
    sampled = copy.copy(_pipeline("draft_model D=4", device))
    sampled.spec = dataclasses.replace(sampled.spec, verify="sample")
    toks = [t for t, _ in sampled.generate_ids(prompt_ids, max_new_tokens=tokens, temperature=1.0, seed=3)]
    V = sampled.target.config.vocab_size
    out["sampled"] = {"ok": all(len(t) == tokens and all(0 <= x < V for x in t) for t in toks),
                      "lengths": [len(t) for t in toks]}
    out["seconds"] = time.perf_counter() - t0
    return out


def verdict(out: dict) -> tuple[bool, str]:
    equal = [n for n, c in out["configs"].items() if c["equal"]]
    n = len(out["configs"])
    ok = len(equal) == n and out["sampled"]["ok"]
    figure = (f"{len(equal)}/{n} greedy configs equal the CPU token for token "
              f"({out['prompts']} prompts x {out['tokens']} tokens); sampled run {'ok' if out['sampled']['ok'] else 'BAD'}")
    for name, c in out["configs"].items():
        if not c["equal"]:
            d = c["differences"][0]
            gap = "?" if d["cpu_top2_gap"] is None else f"{d['cpu_top2_gap']:.2e}"
            figure += f"; {name}: prompt {d['prompt']} differs at {d['position']} (CPU top-2 gap {gap})"
    return ok, figure


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 2 prompts")
    ap.add_argument("--configs", default=None, help=f"comma-separated subset of: {', '.join(CONFIGS)}")
    ap.add_argument("--prompts", type=int, default=None, help=f"how many of the {len(PROMPTS)} prompts")
    ap.add_argument("--results", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.tokens < 1:
        ap.error(f"--tokens must be >= 1, got {args.tokens}")
    configs = QUICK if args.quick else tuple(CONFIGS)
    if args.configs:
        configs = tuple(c.strip() for c in args.configs.split(","))
        unknown = [c for c in configs if c not in CONFIGS]
        if unknown:
            ap.error(f"--configs: unknown {unknown}; expected some of {', '.join(CONFIGS)}")
    n = args.prompts if args.prompts is not None else (2 if args.quick else len(PROMPTS))
    if not 1 <= n <= len(PROMPTS):
        ap.error(f"--prompts must be in [1, {len(PROMPTS)}], got {n}")
    prompts = PROMPTS[:n]
    out = run(args.device, args.tokens, configs, prompts)
    ok, figure = verdict(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if args.results:
        status = ("pass" if ok else "fail") if args.device != "cpu" else ("skipped: no GPU" if ok else "fail")
        write_result(args.results, "runtime.greedy", status,
                     figure if args.device != "cpu" else f"cpu dry-run (cpu vs cpu): {figure}", out, out["seconds"])
    print(f"runtime.greedy on {args.device}: {'pass' if ok else 'FAIL'}: {figure}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
