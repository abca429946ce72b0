"""Measure the DeepSeek-V3-layout demo target as it ships, and write its model card.

    python -m trtspec.zoo.deepseek_eval DIR [--card CARD]     # re-measure a trained directory

Everything is measured after reloading the saved (bfloat16) weights in float32: the main model's
held-out loss with Hugging Face's ``DeepseekV3ForCausalLM``; the MTP layer teacher-forced on held-out
windows (its loss on ``x_{t+2}`` and its top-1 agreement with the target's own next-token argmax there:
the acceptance rate of a first draft); MTP speculative decoding in the trtspec runtime on held-out
function prompts (greedy chains, AL for D = 1..max_draft_len, output identical to the target alone);
CPU tokens/s at batch 1 (per second of the process's CPU time, one thread). The acceptance profile at ``max_draft_len`` goes to ``acceptance.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def mtp_teacher_forced(model_dir: Path, stream, seq_len: int, windows: int) -> dict:
    """MTP cross-entropy on ``x_{t+2}`` and top-1 agreement with the target's argmax at t+1 (runtime, fp32)."""
    import torch
    import torch.nn.functional as F

    from trtspec.runtime import masks
    from trtspec.runtime.deepseek import load_mtp
    from trtspec.runtime.models import load_model

    target = load_model(model_dir)
    mtp = load_mtp(model_dir, target)
    n = min(windows, (stream.numel() - 2) // seq_len)
    loss, agree, count = 0.0, 0, 0
    with torch.inference_mode():
        for start in range(0, n, 8):
            idx = torch.arange(start, min(n, start + 8)) * seq_len
            x = torch.stack([stream[j: j + seq_len + 2] for j in idx.tolist()])        # [b, S+2]
            b, S = x.shape[0], seq_len
            rows, zero = torch.arange(b), torch.zeros(b, dtype=torch.long)
            pos, wi, mask = masks.chain_block(zero, torch.full((b,), S), S, S)
            h, _ = target(x[:, :S], pos, target.new_cache(b, S), rows, wi, mask)      # h_t of x_0..x_{S-1}
            t_next = target.logits(h).argmax(-1)                                        # target's x_{t+1}
            _, logits = mtp(x[:, 1:S], h[:, :S - 1], pos[:, :S - 1], mtp.new_cache(b, S), rows, wi[:, :S - 1],
                            mask[:, :S - 1, :S])                                       # predicts x_{t+2}
            loss += F.cross_entropy(logits.flatten(0, 1), x[:, 2:S + 1].flatten(), reduction="sum").item()
            agree += int((logits.argmax(-1) == t_next[:, 1:]).sum())
            count += b * (S - 1)
    return {"loss": loss / count, "top1_agreement_with_target": agree / count, "positions": count}


def _profile_from(stats, draft_len: int, source: str) -> dict:
    """``trtspec.acceptance/v1`` from the engine's counters (per-position acceptances over ``steps``)."""
    from .spec_eval import acceptance_profile

    ge = list(stats.accepted_per_pos) + [0] * (draft_len - len(stats.accepted_per_pos))   # steps accepting >= k
    ge = [stats.steps] + ge[:draft_len]
    accepted = [n for n in range(draft_len + 1) for _ in range(ge[n] - (ge[n + 1] if n < draft_len else 0))]
    prof = acceptance_profile(accepted, draft_len, source=source)
    prof["drafter"] = "mtp"
    return prof


def acceptance_and_speed(model_dir: Path, prompts: list[list[int]], new_tokens: int, max_draft_len: int,
                         speed_prompts: int, log) -> dict:
    """AL and output identity for D = 0..max_draft_len (all prompts in one batch), tok/s at B=1 per second of
    this process's CPU time (one thread: the wall time of an idle core, whatever else the machine runs)."""
    import torch

    from trtspec.runtime import load_pipeline

    out = {"al_by_draft_len": {}, "greedy_match": {}, "tok_s_b1": {}, "threads": torch.get_num_threads(),
           "clock": "process CPU time"}
    base = load_pipeline(model_dir, drafter="mtp", draft_len=0)
    ref = [t for t, _ in base.generate_ids(prompts, max_new_tokens=new_tokens)]
    for d in range(0, max_draft_len + 1):
        pipe = base if d == 0 else load_pipeline(model_dir, drafter="mtp", draft_len=d)
        if d:
            got = [t for t, _ in pipe.generate_ids(prompts, max_new_tokens=new_tokens)]
            out["al_by_draft_len"][d] = pipe.last_stats.mean_al
            out["greedy_match"][d] = sum(g == r for g, r in zip(got, ref)) / len(prompts)
            if d == max_draft_len:
                out["profile_stats"] = pipe.last_stats
        t0, toks = time.process_time(), 0
        for p in prompts[:speed_prompts]:
            toks += len(pipe.generate_ids([p], max_new_tokens=new_tokens)[0][0])
        out["tok_s_b1"][d] = toks / (time.process_time() - t0)
        log(f"D={d}: AL {out['al_by_draft_len'].get(d, 1.0):.3f} match {out['greedy_match'].get(d, 1.0):.2f} "
            f"{out['tok_s_b1'][d]:.0f} tok/s (B=1)")
    return out


TRAINING_KEYS = ("config", "corpus", "tokenizer", "params", "tokens_seen", "final_train_loss", "expert_load_max_over_mean",
                 "wall_s", "cpu_s")


def training_info(model_dir: Path) -> dict:
    """What training recorded: ``training.json`` before measurement, the same keys of ``measurements.json`` after."""
    path = model_dir / "training.json"
    if path.is_file():
        return json.loads(path.read_text())
    m = json.loads((model_dir / "measurements.json").read_text())
    return {k: m[k] for k in TRAINING_KEYS if k in m}


def finish(model_dir: Path, cfg, split, tok, log=print) -> dict:
    """Measure ``model_dir`` (trained by :mod:`trtspec.zoo.deepseek`), write ``acceptance.json`` and return
    ``training.json`` merged with the measurements (the caller writes ``measurements.json``)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from . import data, spec_eval

    hf_logging.set_verbosity_error()
    model_dir = Path(model_dir)
    info = training_info(model_dir)
    heldout = data.encode_corpus(tok, split.read("heldout"))
    hf = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32)
    main_loss = spec_eval.heldout_loss(hf, heldout, cfg.seq_len, cfg.eval_windows)
    del hf
    mtp = mtp_teacher_forced(model_dir, heldout, cfg.seq_len, cfg.eval_windows)
    log(f"held-out: main loss {main_loss:.4f}, MTP loss {mtp['loss']:.4f}, MTP top-1 agreement "
        f"{mtp['top1_agreement_with_target']:.3f}")
    prompts = data.function_prompts(split, tok, cfg.num_prompts, cfg.prompt_tokens)
    acc = acceptance_and_speed(model_dir, prompts, cfg.new_tokens, cfg.max_draft_len, cfg.speed_prompts, log)
    source = (f"trtspec.zoo.deepseek_eval: trtspec runtime, drafter mtp (the target's MTP layer chained), greedy chain "
              f"D={cfg.max_draft_len}, {cfg.num_prompts} held-out stdlib function prompts x {cfg.new_tokens} new "
              f"tokens, fp32 on CPU, Python {split.python}")
    profile = _profile_from(acc.pop("profile_stats"), cfg.max_draft_len, source)
    (model_dir / "acceptance.json").write_text(json.dumps(profile, indent=2) + "\n")
    (model_dir / "training.json").unlink(missing_ok=True)
    base = acc["tok_s_b1"][0]
    info.update({
        "heldout_tokens": int(heldout.numel()),
        "heldout_loss": {"main": main_loss, "mtp": mtp["loss"]},
        "heldout_ppl": {"main": math.exp(main_loss)},
        "mtp_top1_agreement": mtp["top1_agreement_with_target"],
        "acceptance": {"al_by_draft_len": acc["al_by_draft_len"], "greedy_match": acc["greedy_match"],
                       "num_prompts": cfg.num_prompts, "prompt_tokens": cfg.prompt_tokens, "new_tokens": cfg.new_tokens},
        "speed": {"threads": acc["threads"], "clock": acc["clock"], "prompts": cfg.speed_prompts,
                  "tok_s_b1": acc["tok_s_b1"],
                  "speedup": {d: v / base for d, v in acc["tok_s_b1"].items() if d}},
    })
    return info


def main(argv: list[str] | None = None) -> int:
    import torch
    from tokenizers import Tokenizer

    from . import DEEPSEEK_CARD, data
    from .deepseek import DeepseekTrainConfig, DeepseekShape
    from .deepseek_card import write_card

    p = argparse.ArgumentParser(prog="python -m trtspec.zoo.deepseek_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir", type=Path, help="a directory written by python -m trtspec.zoo.train --arch deepseek-v3")
    p.add_argument("--card", type=Path, default=None, help=f"model card to write (default: none; the shipped card is "
                                                           f"{DEEPSEEK_CARD.name})")
    args = p.parse_args(argv)
    raw = dict(training_info(args.model_dir)["config"])
    raw["shape"] = DeepseekShape(**raw["shape"])
    cfg = DeepseekTrainConfig(**raw)
    torch.set_num_threads(cfg.threads)
    split = data.CorpusSplit.build(heldout_modulus=cfg.heldout_modulus, max_files=cfg.max_files)
    tok = Tokenizer.from_file(str(args.model_dir / "tokenizer.json"))
    t0 = time.perf_counter()
    result = finish(args.model_dir, cfg, split, tok)
    result["wall_s"]["measure"] = time.perf_counter() - t0
    result["wall_s"]["total"] = result["wall_s"]["train"] + result["wall_s"]["measure"]
    (args.model_dir / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.card is not None:
        write_card(args.model_dir, args.card)
    return 0


if __name__ == "__main__":
    sys.exit(main())
