"""Train the demo target/draft pair on the Python standard library (CPU, deterministic).

    python -m trtspec.zoo.train            # full run into trtspec/zoo/demo (+ MODEL_CARD.md), ~75 min on 2 cores
                                           # (pair + measurements ~30 min, EAGLE-3 head ~40 min)
    python -m trtspec.zoo.train --smoke --out /tmp/zoo   # 20 tiny steps, for CI
    python -m trtspec.zoo.train --arch deepseek-v3       # the second demo target (MLA, MoE, MTP) into
                                                         # trtspec/zoo/deepseek: see trtspec.zoo.deepseek

Stages: corpus split and byte-level BPE (:mod:`trtspec.zoo.data`) -> target (Llama, GQA) trained with
next-token cross-entropy -> draft (shallow Llama, same tokenizer) trained with cross-entropy on the
same data, then distilled with KL(target || draft) on training windows -> both saved as HF
directories (``save_dtype``, default bfloat16) -> reloaded in fp32 and measured: held-out loss,
AL at D = 1..max_draft_len on held-out function prompts, CPU tokens/s (:mod:`trtspec.zoo.spec_eval`).
Last, the drafter heads (EAGLE-3, DFlash, DSpark) are trained for the target into ``<out>/<drafter>`` by
``trtspec train-draft`` with the recipes of :mod:`trtspec.zoo.heads` (``heads=()`` / ``--no-heads`` skips
them; the smoke run trains none). Everything is written to ``<out>.partial`` and renamed to ``<out>`` when
complete.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """Llama shape. ``hidden``/``intermediate`` should be multiples of 128 for AWQ (block 128) in the builder."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int

    def __post_init__(self):
        for name in ("hidden", "layers", "heads", "kv_heads", "intermediate"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines the shipped pair. Defaults are the full run; :meth:`smoke` the CI run.

    Lengths are in tokens; ``batch_size`` windows of ``seq_len`` tokens per optimizer step; learning
    rates follow linear warmup (``warmup`` steps) then cosine decay to ``lr * min_lr_ratio``.
    ``autocast_bf16`` (default True) runs forward/backward matmuls in bfloat16 (fp32 master weights),
    about 1.5x faster on CPUs with AMX/AVX512-BF16. ``threads`` defaults to 1: on a shared, oversubscribed
    machine two OpenMP threads spin at every barrier while the other is descheduled (measured here: 8.7
    CPU-s per step with 2 threads vs 1.2 CPU-s with 1 thread, same step).
    """

    seed: int = 0
    threads: int = 1
    vocab_size: int = 4096
    heldout_modulus: int = 20
    max_files: int | None = None
    seq_len: int = 256
    max_position: int = 512
    batch_size: int = 8
    target: ModelShape = field(default_factory=lambda: ModelShape(256, 6, 8, 2, 768))
    draft: ModelShape = field(default_factory=lambda: ModelShape(256, 1, 8, 2, 768))
    target_steps: int = 600
    draft_steps: int = 80
    distill_steps: int = 250
    autocast_bf16: bool = True
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.01
    save_dtype: str = "bfloat16"
    eval_windows: int = 64
    num_prompts: int = 32
    prompt_tokens: int = 64
    new_tokens: int = 64
    max_draft_len: int = 8
    heads: tuple[str, ...] = ("eagle3", "dflash", "dspark")

    def __post_init__(self):
        for name in ("threads", "seq_len", "batch_size", "target_steps", "eval_windows", "num_prompts",
                     "prompt_tokens", "new_tokens", "max_draft_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("draft_steps", "distill_steps", "warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.seq_len > self.max_position:
            raise ValueError(f"seq_len ({self.seq_len}) must be <= max_position ({self.max_position})")
        if self.prompt_tokens + self.new_tokens + self.max_draft_len + 1 > self.max_position:
            raise ValueError("prompt_tokens + new_tokens + max_draft_len + 1 must fit in max_position")
        if self.save_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"save_dtype: expected 'float32' or 'bfloat16', got {self.save_dtype!r}")
        if not 0 < self.lr < 1 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"lr must be in (0, 1) and min_lr_ratio in [0, 1], got {self.lr}, {self.min_lr_ratio}")

    @classmethod
    def smoke(cls) -> "TrainConfig":
        """20 target steps of tiny models on 24 files: checks the pipeline end to end in well under a minute."""
        return cls(vocab_size=512, max_files=24, seq_len=64, max_position=256, batch_size=4,
                   target=ModelShape(128, 2, 4, 2, 256), draft=ModelShape(128, 1, 4, 2, 256),
                   target_steps=20, draft_steps=10, distill_steps=10, warmup=2, eval_windows=4,
                   num_prompts=2, prompt_tokens=32, new_tokens=16, max_draft_len=4, heads=())


def llama_config(shape: ModelShape, cfg: TrainConfig, eos_id: int):
    from transformers import LlamaConfig

    c = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        max_position_embeddings=cfg.max_position, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
    )
    c.architectures = ["LlamaForCausalLM"]
    return c


def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, total - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _batches(stream, cfg: TrainConfig, steps: int, seed: int):
    """Yield ``steps`` batches [batch_size, seq_len+1] of random windows (seeded, independent of model RNG)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    hi = stream.numel() - cfg.seq_len - 1
    if hi < 1:
        raise ValueError(f"corpus too small: {stream.numel()} tokens for seq_len {cfg.seq_len}")
    for _ in range(steps):
        starts = torch.randint(0, hi, (cfg.batch_size,), generator=g)
        yield torch.stack([stream[s : s + cfg.seq_len + 1] for s in starts.tolist()])


def _optimizer(model, cfg: TrainConfig):
    import torch

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def train_loop(model, stream, cfg: TrainConfig, steps: int, seed: int, name: str, log, teacher=None) -> list[float]:
    """Train ``model`` for ``steps`` steps; cross-entropy, or KL(teacher || model) when ``teacher`` is given.

    Returns the per-step training losses (nats/token).
    """
    import torch
    import torch.nn.functional as F

    if steps == 0:
        return []
    opt = _optimizer(model, cfg)
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    for step, batch in enumerate(_batches(stream, cfg, steps, seed)):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, steps, cfg)
        x, y = batch[:, :-1], batch[:, 1:]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast_bf16):
            logits = model(input_ids=x).logits.float()  # [B, S, V]
            if teacher is not None:
                with torch.no_grad():
                    t_logits = teacher(input_ids=x).logits.float()
        if teacher is None:
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        else:
            t_logp = F.log_softmax(t_logits.flatten(0, 1), -1)
            loss = F.kl_div(F.log_softmax(logits.flatten(0, 1), -1), t_logp, log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == steps - 1:
            el = time.perf_counter() - t0
            log(f"[{name}] step {step + 1}/{steps} loss {sum(losses[-25:]) / len(losses[-25:]):.4f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {el:.0f}s ({(step + 1) / el:.2f} steps/s)")
    model.eval()
    return losses


def _save(model, tok_dir: Path, out_dir: Path, dtype: str, eos_id: int) -> None:
    import torch
    from transformers import GenerationConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    m = model.to(getattr(torch, dtype))
    m.save_pretrained(out_dir, safe_serialization=True)
    model.to(torch.float32)
    GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, do_sample=False,
                     max_new_tokens=64).save_pretrained(out_dir)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tok_dir / f, out_dir / f)


def run(cfg: TrainConfig, out: Path, card: Path | None = None, log=print) -> dict:
    """Train, save and measure the pair into ``out`` (``target/``, ``draft/``, ``acceptance.json``,
    ``measurements.json``); write the model card to ``card`` if given. Returns the measurements dict."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from . import data, spec_eval
    from .card import write_model_card

    out = Path(out)
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)

    split = data.CorpusSplit.build(heldout_modulus=cfg.heldout_modulus, max_files=cfg.max_files)
    train_texts = split.read("train")
    tok = data.train_tokenizer(train_texts, cfg.vocab_size)
    tok_dir = partial / "tokenizer"
    data.save_tokenizer(tok, tok_dir, model_max_length=cfg.max_position)
    eos_id = tok.token_to_id(data.EOS_TOKEN)
    train_stream = data.encode_corpus(tok, train_texts)
    heldout_stream = data.encode_corpus(tok, split.read("heldout"))
    log(f"corpus: {len(split.train)} train files ({train_stream.numel()} tokens), "
        f"{len(split.heldout)} held-out files ({heldout_stream.numel()} tokens), python {split.python}")

    torch.manual_seed(cfg.seed)
    target = LlamaForCausalLM(llama_config(cfg.target, cfg, eos_id))
    t0 = time.perf_counter()
    target_losses = train_loop(target, train_stream, cfg, cfg.target_steps, cfg.seed + 1, "target", log)
    target_s = time.perf_counter() - t0

    torch.manual_seed(cfg.seed + 100)
    draft = LlamaForCausalLM(llama_config(cfg.draft, cfg, eos_id))
    t0 = time.perf_counter()
    draft_losses = train_loop(draft, train_stream, cfg, cfg.draft_steps, cfg.seed + 2, "draft", log)
    for p in target.parameters():
        p.requires_grad_(False)
    distill_losses = train_loop(draft, train_stream, cfg, cfg.distill_steps, cfg.seed + 3, "distill", log,
                                teacher=target)
    draft_s = time.perf_counter() - t0

    _save(target, tok_dir, partial / "target", cfg.save_dtype, eos_id)
    _save(draft, tok_dir, partial / "draft", cfg.save_dtype, eos_id)
    shutil.rmtree(tok_dir)
    del target, draft

    # measure what ships: reload from disk in fp32 (the runtime's compute dtype)
    target = AutoModelForCausalLM.from_pretrained(partial / "target", local_files_only=True, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(partial / "draft", local_files_only=True, dtype=torch.float32)
    losses = {name: spec_eval.heldout_loss(m, heldout_stream, cfg.seq_len, cfg.eval_windows)
              for name, m in (("target", target), ("draft", draft))}
    log(f"held-out loss: target {losses['target']:.4f}, draft {losses['draft']:.4f}")
    prompts = data.function_prompts(split, tok, cfg.num_prompts, cfg.prompt_tokens)
    meas = spec_eval.measure(target, draft, prompts, cfg.new_tokens, cfg.max_draft_len, eos_id,
                             progress=lambda d, o: log(f"D={d}: AL {o['al_by_draft_len'][d]:.3f} "
                                                       f"speedup {o['target_s'] / o['spec_s'][d]:.2f}x"))
    acc8 = meas.pop("accepted_by_draft_len")
    profile = spec_eval.acceptance_profile(
        acc8[cfg.max_draft_len], cfg.max_draft_len,
        source=(f"trtspec.zoo.train: greedy chain speculative decoding, demo target + draft_model, "
                f"{cfg.num_prompts} held-out stdlib function prompts x {cfg.new_tokens} new tokens, "
                f"D={cfg.max_draft_len}, fp32 on CPU, Python {split.python}"),
    )
    (partial / "acceptance.json").write_text(json.dumps(profile, indent=2) + "\n")

    n_params = {name: sum(p.numel() for p in m.parameters()) for name, m in (("target", target), ("draft", draft))}
    tokens_per_step = cfg.batch_size * cfg.seq_len
    result = {
        "config": asdict(cfg),
        "corpus": {**split.summary(), "train_tokens": int(train_stream.numel()),
                   "heldout_tokens": int(heldout_stream.numel())},
        "tokenizer": {"type": "byte-level BPE (tokenizers)", "vocab_size": tok.get_vocab_size(),
                      "special_tokens": list(data.SPECIAL_TOKENS), "eos": data.EOS_TOKEN},
        "params": n_params,
        "tokens_seen": {"target": cfg.target_steps * tokens_per_step,
                        "draft_ce": cfg.draft_steps * tokens_per_step,
                        "draft_distill": cfg.distill_steps * tokens_per_step},
        "final_train_loss": {"target": _tail(target_losses), "draft_ce": _tail(draft_losses),
                             "draft_distill_kl": _tail(distill_losses)},
        "heldout_loss": losses,
        "heldout_ppl": {k: math.exp(v) for k, v in losses.items()},
        "wall_s": {"target": target_s, "draft": draft_s},
        "acceptance": {"al_by_draft_len": meas["al_by_draft_len"], "greedy_match": meas["greedy_match"],
                       "num_prompts": cfg.num_prompts, "prompt_tokens": cfg.prompt_tokens,
                       "new_tokens": cfg.new_tokens},
        "speed": {"threads": meas["threads"], "target_tokens": meas["target_tokens"], "target_s": meas["target_s"],
                  "target_tok_s": meas["target_tokens"] / meas["target_s"],
                  "spec_tok_s": {d: meas["spec_tokens"][d] / s for d, s in meas["spec_s"].items()},
                  "speedup": {d: (meas["spec_tokens"][d] / s) / (meas["target_tokens"] / meas["target_s"])
                              for d, s in meas["spec_s"].items()}},
    }
    for drafter in cfg.heads:
        from . import heads

        heads.train_head(drafter, partial / "target", partial / drafter, quiet=True, log=log)
    result["wall_s"]["total"] = time.perf_counter() - t_start
    (partial / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    if card is not None:
        write_model_card(out, card)
    log(f"done in {result['wall_s']['total']:.0f}s -> {out}")
    return result


def _tail(losses: list[float], n: int = 25) -> float | None:
    return sum(losses[-n:]) / len(losses[-n:]) if losses else None


ARCHS = ("llama", "deepseek-v3")


def _main_deepseek(p: argparse.ArgumentParser, args) -> int:
    """``--arch deepseek-v3``: train the DeepSeek-V3-layout target (``--target-steps`` = its joint steps)."""
    from . import DEEPSEEK_CARD, DEEPSEEK_DIR
    from .deepseek import DeepseekTrainConfig, run as run_deepseek

    if args.draft_steps is not None or args.distill_steps is not None or args.no_heads:
        p.error("--draft-steps, --distill-steps and --no-heads belong to --arch llama")
    if args.smoke and args.out is None:
        p.error("--smoke needs --out DIR (the smoke model must not replace the shipped one)")
    cfg = DeepseekTrainConfig.smoke() if args.smoke else DeepseekTrainConfig()
    if args.target_steps is not None:
        cfg = replace(cfg, steps=args.target_steps)
    out = args.out if args.out is not None else DEEPSEEK_DIR
    card = DEEPSEEK_CARD if args.out is None else out.with_name(out.name + "_MODEL_CARD.md")
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    result = run_deepseek(cfg, out, card=card, log=log)
    if args.json:
        print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    from . import DEMO_DIR, MODEL_CARD

    p = argparse.ArgumentParser(prog="python -m trtspec.zoo.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny 20-step run (CI); requires --out")
    p.add_argument("--out", type=Path, default=None,
                   help=f"output directory (default: the shipped {DEMO_DIR}, which also rewrites MODEL_CARD.md)")
    p.add_argument("--target-steps", type=int, default=None,
                   help="override TrainConfig.target_steps (deepseek-v3: DeepseekTrainConfig.steps, the joint steps)")
    p.add_argument("--draft-steps", type=int, default=None, help="override TrainConfig.draft_steps")
    p.add_argument("--distill-steps", type=int, default=None, help="override TrainConfig.distill_steps")
    p.add_argument("--no-heads", action="store_true", help="do not train the drafter heads (trtspec.zoo.heads)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.add_argument("--arch", choices=ARCHS, default=ARCHS[0],
                   help="llama: the demo pair (default); deepseek-v3: the MLA/MoE/MTP target (trtspec.zoo.deepseek)")
    args = p.parse_args(argv)
    if args.arch == "deepseek-v3":
        return _main_deepseek(p, args)
    cfg = TrainConfig.smoke() if args.smoke else TrainConfig()
    if args.no_heads:
        cfg = replace(cfg, heads=())
    overrides = {k: v for k, v in (("target_steps", args.target_steps), ("draft_steps", args.draft_steps),
                                   ("distill_steps", args.distill_steps)) if v is not None}
    cfg = replace(cfg, **overrides)
    if args.smoke and args.out is None:
        p.error("--smoke needs --out DIR (the smoke pair must not replace the shipped one)")
    out = args.out if args.out is not None else DEMO_DIR
    card = MODEL_CARD if args.out is None else out.with_name(out.name + "_MODEL_CARD.md")
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    result = run(cfg, out, card=card, log=log)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
