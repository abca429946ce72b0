"""Train an EAGLE-3 head for a target (CPU, deterministic) and write it in NVIDIA Model-Optimizer's export layout.

    python -m trtspec.zoo.eagle3                        # head for the shipped demo target -> trtspec/zoo/demo/eagle3
    python -m trtspec.zoo.eagle3 --smoke --target DIR --out /tmp/head   # a few tiny steps, for CI

EAGLE-3 (Li et al. 2025, arXiv 2503.01840): one decoder layer fed by ``g_t = fc(cat(target hidden
states at a low, a middle and a high layer))`` and the embedding of the next token; its lm_head
covers a reduced *draft vocabulary* (the target's most frequent greedy outputs, mapped back by
``d2t``). Deeper drafts feed the layer's own output as ``g``; training-time test (TTT) trains
exactly that: step ``s`` of a window runs the layer on ``(embed(x_{t+1+s}), h_{s-1}[t])`` at
position ``t+s``, attending to step-0 keys ``0..t`` and to the steps ``1..s`` keys of index ``t``,
as the runtime's drafter (:mod:`trtspec.runtime.drafters.eagle3`) does at depth ``s+1``.

Data: half the windows are the target's own greedy continuations of training-corpus prompts
(the text the head drafts for at inference), half are corpus windows. Labels: the target's
next-token distribution restricted to the draft vocabulary (soft cross-entropy), step ``s``
weighted ``loss_decay**s``. The math of the layer is the runtime's :class:`Eagle3Head`, whose
parameters are trained directly, so what is measured is what ships.

Everything is written to ``<out>.partial`` and renamed to ``<out>`` when complete.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

EAGLE_CONFIG = {   # Model-Optimizer's eagle_config block of an exported EAGLE-3 head
    "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True, "use_last_layernorm": True,
    "use_mtp_layernorm": False, "next_layer_regular": True, "parallel_draft_step": 1,
    "parallel_draft_heads_num_layers": 1,
}


@dataclass(frozen=True)
class Eagle3TrainConfig:
    """Everything that determines the head. Defaults are the shipped demo head; :meth:`smoke` the CI run.

    ``aux_layers``: target layers whose outputs ``fc`` fuses (empty = low/middle/last of the target);
    ``draft_vocab``: rows of the head's lm_head (0 = the full vocabulary, no ``d2t``);
    ``ttt_steps``: training-time-test depth; ``selfgen``: windows of target greedy text (prompt
    ``prompt_tokens`` + continuation up to ``seq_len``); ``corpus``: windows of training text;
    ``steps`` optimizer steps of ``batch_size`` windows; lr: linear warmup then cosine to ``lr * 0.1``.
    """

    seed: int = 0
    threads: int = 1
    aux_layers: tuple[int, ...] = ()
    intermediate: int = 512
    draft_vocab: int = 1024
    ttt_steps: int = 3
    loss_decay: float = 0.8
    seq_len: int = 256
    prompt_tokens: int = 32
    selfgen: int = 1536
    corpus: int = 256
    batch_size: int = 8
    steps: int = 2000
    lr: float = 2e-3
    warmup: int = 30
    weight_decay: float = 0.01
    autocast_bf16: bool = True
    save_dtype: str = "bfloat16"
    heldout_modulus: int = 20
    max_files: int | None = None
    num_prompts: int = 32
    eval_prompt_tokens: int = 64
    new_tokens: int = 64
    max_draft_len: int = 8

    def __post_init__(self):
        for name in ("threads", "intermediate", "ttt_steps", "seq_len", "prompt_tokens", "batch_size", "steps",
                     "num_prompts", "eval_prompt_tokens", "new_tokens", "max_draft_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("selfgen", "corpus", "warmup", "draft_vocab"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.selfgen + self.corpus < self.batch_size:
            raise ValueError(f"selfgen + corpus ({self.selfgen + self.corpus}) must be >= batch_size ({self.batch_size})")
        if self.prompt_tokens >= self.seq_len:
            raise ValueError(f"prompt_tokens ({self.prompt_tokens}) must be < seq_len ({self.seq_len})")
        if self.ttt_steps >= self.seq_len - 1:
            raise ValueError(f"ttt_steps ({self.ttt_steps}) must be < seq_len - 1 ({self.seq_len - 1})")
        if not 0 < self.loss_decay <= 1 or not 0 < self.lr < 1:
            raise ValueError(f"loss_decay must be in (0, 1] and lr in (0, 1), got {self.loss_decay}, {self.lr}")
        if self.save_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"save_dtype: expected 'float32' or 'bfloat16', got {self.save_dtype!r}")

    @classmethod
    def smoke(cls) -> "Eagle3TrainConfig":
        """A few tiny steps on a handful of files: checks the pipeline end to end in seconds."""
        return cls(intermediate=64, draft_vocab=0, ttt_steps=2, seq_len=48, prompt_tokens=16, selfgen=8, corpus=8,
                   batch_size=4, steps=6, warmup=2, max_files=24, num_prompts=2, eval_prompt_tokens=16,
                   new_tokens=12, max_draft_len=3)


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """Low, middle and last layer (deduplicated): ``(1, L//2, L-1)`` for L >= 3."""
    return tuple(sorted({min(1, num_layers - 1), num_layers // 2, num_layers - 1}))


def head_config(target_cfg: dict, cfg: Eagle3TrainConfig, aux: tuple[int, ...], draft_vocab: int) -> dict:
    """``config.json`` of the head, as Model-Optimizer exports ``LlamaForCausalLMEagle3``."""
    t = target_cfg
    head_dim = t.get("head_dim") or t["hidden_size"] // t["num_attention_heads"]
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "bos_token_id": t.get("bos_token_id"), "eos_token_id": t.get("eos_token_id"),
        "pad_token_id": t.get("pad_token_id"),
        "hidden_act": "silu", "hidden_size": t["hidden_size"], "intermediate_size": cfg.intermediate,
        "num_attention_heads": t["num_attention_heads"], "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": head_dim, "num_hidden_layers": 1, "max_position_embeddings": t["max_position_embeddings"],
        "rms_norm_eps": t["rms_norm_eps"], "rope_theta": (t.get("rope_parameters") or {}).get("rope_theta",
                                                                                             t.get("rope_theta", 10000.0)),
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "vocab_size": t["vocab_size"], "draft_vocab_size": draft_vocab, "torch_dtype": cfg.save_dtype,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(aux), **EAGLE_CONFIG},
    }


# ----------------------------------------------------------------------------------------- data


def greedy_continue(model, prompts, length: int, batch: int = 64):
    """Extend int64 ``[N, P]`` prompts to ``[N, length]`` by the model's greedy decoding (EOS does not stop it)."""
    import torch

    from trtspec.runtime import masks

    out = []
    N, P = prompts.shape
    for i in range(0, N, batch):
        x = prompts[i:i + batch]
        B = x.shape[0]
        cache = model.new_cache(B, length)
        rows = torch.arange(B)
        pos = torch.arange(P)[None].expand(B, P)
        h, _ = model(x, pos, cache, rows, pos, masks.causal(P).expand(B, P, P))
        seq = [x, model.logits(h[:, -1:]).argmax(-1)]
        for n in range(P, length - 1):
            p = torch.full((B, 1), n)
            h, _ = model(seq[-1], p, cache, rows, p, torch.ones(B, 1, n + 1, dtype=torch.bool))
            seq.append(model.logits(h).argmax(-1))
        out.append(torch.cat(seq, dim=1))
    return torch.cat(out)


def target_features(model, windows, aux: tuple[int, ...], draft_ids, batch: int = 16):
    """Target pass over ``[N, S]`` windows: (aux hidden states ``[N, S, k*E]`` float32, log-probs over the
    draft vocabulary ``[N, S, Vd]`` bfloat16 (renormalised there), greedy next token ``[N, S]``)."""
    import torch

    from trtspec.runtime import masks

    feats, logps, greedy = [], [], []
    N, S = windows.shape
    for i in range(0, N, batch):
        x = windows[i:i + batch]
        B = x.shape[0]
        pos = torch.arange(S)[None].expand(B, S)
        h, a = model(x, pos, model.new_cache(B, S), torch.arange(B), pos, masks.causal(S).expand(B, S, S), capture=aux)
        logits = model.logits(h)
        greedy.append(logits.argmax(-1))
        logps.append(torch.log_softmax(logits[..., draft_ids], -1).to(torch.bfloat16))
        feats.append(a)
    return torch.cat(feats), torch.cat(logps), torch.cat(greedy)


def choose_draft_vocab(counts, size: int):
    """The ``size`` most frequent ids (ties: lower id), ascending, and ``d2t`` (target id = draft id + d2t)."""
    import torch

    order = sorted(range(counts.numel()), key=lambda i: (-int(counts[i]), i))[:size]
    ids = torch.tensor(sorted(order), dtype=torch.int64)
    return ids, ids - torch.arange(size)


# ------------------------------------------------------------------------------------ training


def ttt_forward(head, embed, tokens, g0, steps: int):
    """Draft logits of every TTT step over whole windows (differentiable, no cache).

    tokens int64 ``[B, S]``; g0 ``[B, S, E]`` = fc(aux). Step s, index t (0 <= t < S-1-s): input
    ``(embed(tokens[t+1+s]), g_s[t])`` at position ``t+s``; keys = step-0 keys ``0..t`` and the step-j
    keys of index t for ``1 <= j <= s``. Returns a list of ``[B, S-1-s, Vd]`` logits, one per step.
    """
    import torch
    import torch.nn.functional as F

    from trtspec.runtime.models import apply_rope, rope_cos_sin

    layer = head.layers[0]
    attn = layer.self_attn
    B, S, _ = g0.shape
    H, Hkv, d = attn.h, attn.hkv, attn.d
    keys, values, outs = [], [], []
    g = g0
    for s in range(steps):
        n = S - 1 - s
        gs = g[:, :n]
        a = torch.cat((layer.input_layernorm(embed(tokens[:, 1 + s:1 + s + n])), layer.hidden_norm(gs)), dim=-1)
        pos = (torch.arange(n) + s)[None].expand(B, n)
        cos, sin = rope_cos_sin(pos, head.inv_freq, gs.dtype, head.config.layer.rope.attention_scale())
        q = apply_rope(attn.q_proj(a).view(B, n, H, d).transpose(1, 2), cos, sin)
        keys.append(apply_rope(attn.k_proj(a).view(B, n, Hkv, d).transpose(1, 2), cos, sin))
        values.append(attn.v_proj(a).view(B, n, Hkv, d).transpose(1, 2))
        k = torch.cat([kj[:, :, :n] for kj in keys], dim=2)            # [B, Hkv, (s+1) n, d]
        v = torch.cat([vj[:, :, :n] for vj in values], dim=2)
        eye = torch.eye(n, dtype=torch.bool)
        mask = torch.cat([torch.ones(n, n, dtype=torch.bool).tril()] + [eye] * s, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=H != Hkv)
        h = gs + attn.o_proj(o.transpose(1, 2).reshape(B, n, H * d))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        outs.append(head.lm_head(head.norm(h)))
        g = h
    return outs


def _lr_at(step: int, cfg: Eagle3TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train_head(head, target, windows, aux_feats, logps, cfg: Eagle3TrainConfig, log) -> list[dict]:
    """Optimise the head's parameters (the target is frozen). Returns per-25-step logs (loss, top-1 per step)."""
    import torch

    params = [p for p in head.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(cfg.seed + 7)
    N = windows.shape[0]
    history, window_loss, window_acc = [], [], []
    head.train()
    t0 = time.perf_counter()
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        idx = torch.randint(0, N, (cfg.batch_size,), generator=g)
        x = windows[idx]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast_bf16):
            g0 = head.fc(aux_feats[idx])
            outs = ttt_forward(head, target.embed, x, g0, cfg.ttt_steps)
        loss, accs = 0.0, []
        for s, logits in enumerate(outs):
            n = logits.shape[1]
            lp = logps[idx, 1 + s:1 + s + n].float()                    # target at position t+1+s
            ls = torch.log_softmax(logits.float(), -1)
            loss = loss + cfg.loss_decay ** s * -(lp.exp() * ls).sum(-1).mean()
            accs.append(float((ls.argmax(-1) == lp.argmax(-1)).float().mean()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        window_loss.append(float(loss.detach()))
        window_acc.append(accs)
        if step % 25 == 24 or step == cfg.steps - 1:
            acc = [sum(a[s] for a in window_acc) / len(window_acc) for s in range(cfg.ttt_steps)]
            rec = {"step": step + 1, "loss": sum(window_loss) / len(window_loss), "top1": acc,
                   "s": time.perf_counter() - t0}
            history.append(rec)
            log(f"[eagle3] step {step + 1}/{cfg.steps} loss {rec['loss']:.4f} top-1 per TTT step "
                + " ".join(f"{a:.3f}" for a in acc) + f" {rec['s']:.0f}s")
            window_loss, window_acc = [], []
    head.eval()
    return history


# ------------------------------------------------------------------------------ export, measure


def save_head(head, config: dict, out_dir: Path, dtype: str) -> None:
    """``config.json`` + ``model.safetensors`` in Model-Optimizer's export layout (``fc``, ``layers.0.*``,
    ``norm``, ``lm_head``, ``d2t`` when the draft vocabulary is reduced)."""
    import torch
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, t in head.state_dict().items():
        if name == "d2t":
            if config["draft_vocab_size"] < config["vocab_size"]:
                tensors[name] = t.to(torch.int64).contiguous()
            continue
        tensors[name] = t.detach().to(getattr(torch, dtype)).contiguous()
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def acceptance_profile(counts, draft_len: int, source: str) -> dict:
    """``trtspec.acceptance/v1`` (drafter eagle3) from censoring-aware per-position counts
    (:class:`trtspec.bench.steps.PositionCounts`: a step whose chain was capped below k by the token
    budget does not count against position k); the counts go into the profile."""
    from trtspec.bench import metrics as M

    if not counts.reached or counts.reached[0] < 1:
        raise ValueError("counts: no verification step drafted anything")
    s = M.summarize_positions(counts.reached[:draft_len], counts.accepted[:draft_len], draft_len=draft_len)
    return M.AcceptanceProfile("eagle3", draft_len, s, {"coding": s}, source,
                               extra={"counts": counts.to_dict()}).to_dict()


def measure_head(target_dir: Path, head_dir: Path, prompts: list[list[int]], cfg: Eagle3TrainConfig, log) -> dict:
    """Greedy chain decoding with the runtime's engine at D = max_draft_len, all prompts in one batch:
    per-step (drafted, accepted) counts per request, and whether every output equals target-only
    greedy decoding."""
    from trtspec.bench.steps import PositionCounts
    from trtspec.runtime import load_pipeline

    base = load_pipeline(target_dir, draft_len=0)
    ref = [o for o, _ in base.generate_ids(prompts, max_new_tokens=cfg.new_tokens)]
    pipe = load_pipeline(target_dir, head_dir, drafter="eagle3", draft_len=cfg.max_draft_len)
    eng = pipe.engine(max_batch_size=len(prompts))
    for i, ids in enumerate(prompts):
        eng.add_request(i, ids, pipe.params(max_new_tokens=cfg.new_tokens))
    got = {i: [] for i in range(len(prompts))}
    seen = {i: (0, 0) for i in range(len(prompts))}
    counts = PositionCounts()
    while eng.has_work():
        for o in eng.step():
            got[o.request_id] += o.new_token_ids
            d0, a0 = seen[o.request_id]
            drafted, accepted = o.stats.draft_tokens - d0, o.stats.accepted_tokens - a0
            seen[o.request_id] = (o.stats.draft_tokens, o.stats.accepted_tokens)
            if drafted:
                counts.add(drafted, accepted)
    match = sum(got[i] == ref[i] for i in range(len(prompts))) / len(prompts)
    al = 1 + sum(counts.accepted) / max(1, counts.reached[0] if counts.reached else 0)
    log(f"[eagle3] D={cfg.max_draft_len}: AL {al:.3f}, per position reached {counts.reached} accepted "
        f"{counts.accepted}, outputs equal to target greedy: {match:.0%}")
    return {"counts": counts, "greedy_match": match}


def run(cfg: Eagle3TrainConfig, target_dir: Path, out: Path, log=print) -> dict:
    """Train a head for ``target_dir`` into ``out`` (config.json, model.safetensors, acceptance.json,
    measurements.json). Returns the measurements dict."""
    import torch
    from tokenizers import Tokenizer

    from trtspec.runtime.config import read_eagle3_config
    from trtspec.runtime.models import Eagle3Head, load_model

    from . import data

    target_dir, out = Path(target_dir), Path(out)
    t_start = time.perf_counter()
    if not (target_dir / "config.json").is_file() or not (target_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(f"--target {target_dir}: expected a Hugging Face directory with config.json and "
                                "tokenizer.json")
    target_cfg = json.loads((target_dir / "config.json").read_text())
    L, V = target_cfg["num_hidden_layers"], target_cfg["vocab_size"]
    aux = cfg.aux_layers or default_aux_layers(L)
    if any(not 0 <= i < L for i in aux):
        raise ValueError(f"aux_layers {aux}: the target has layers 0..{L - 1}")
    draft_vocab = cfg.draft_vocab or V
    if draft_vocab > V:
        raise ValueError(f"draft_vocab ({draft_vocab}) must be <= the target's vocab_size ({V})")
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)

    tok = Tokenizer.from_file(str(target_dir / "tokenizer.json"))
    split = data.CorpusSplit.build(heldout_modulus=cfg.heldout_modulus, max_files=cfg.max_files)
    stream = data.encode_corpus(tok, split.read("train"))
    target = load_model(target_dir)
    for p in target.parameters():
        p.requires_grad_(False)

    g = torch.Generator().manual_seed(cfg.seed + 1)
    hi = stream.numel() - cfg.seq_len - 1
    starts = torch.randint(0, hi, (cfg.selfgen + cfg.corpus,), generator=g).tolist()
    t0 = time.perf_counter()
    with torch.inference_mode():
        prompts = torch.stack([stream[s:s + cfg.prompt_tokens] for s in starts[:cfg.selfgen]]) \
            if cfg.selfgen else torch.zeros(0, cfg.prompt_tokens, dtype=torch.long)
        selfgen = greedy_continue(target, prompts, cfg.seq_len) if cfg.selfgen else prompts.new_zeros(0, cfg.seq_len)
        corpus = torch.stack([stream[s:s + cfg.seq_len] for s in starts[cfg.selfgen:]]) \
            if cfg.corpus else selfgen.new_zeros(0, cfg.seq_len)
        log(f"[eagle3] {cfg.selfgen} greedy continuations + {cfg.corpus} corpus windows of {cfg.seq_len} tokens "
            f"({time.perf_counter() - t0:.0f}s)")
        # draft vocabulary: the target's most frequent greedy outputs (+ corpus counts to break ties)
        counts = torch.bincount(selfgen[:, cfg.prompt_tokens:].flatten(), minlength=V) * 1000 \
            + torch.bincount(stream, minlength=V)
        draft_ids, d2t = choose_draft_vocab(counts, draft_vocab)
        windows = torch.cat([selfgen, corpus])
        t0 = time.perf_counter()
        aux_feats, logps, greedy = target_features(target, windows, aux, draft_ids)
        coverage = float(torch.isin(greedy, draft_ids).float().mean())
        log(f"[eagle3] target features of {windows.shape[0]} windows ({time.perf_counter() - t0:.0f}s); "
            f"draft vocabulary {draft_vocab}/{V} covers {coverage:.1%} of the target's greedy predictions")

    config = head_config(target_cfg, cfg, aux, draft_vocab)
    (partial / "config.json").write_text(json.dumps(config) + "\n")
    head = Eagle3Head(read_eagle3_config(partial), target_cfg["hidden_size"])
    with torch.no_grad():                          # start from the target's output layer, restricted
        head.lm_head.weight.copy_(target.lm_head.weight[draft_ids])
        head.norm.weight.copy_(target.model.norm.weight)
        head.d2t.copy_(d2t)
    t0 = time.perf_counter()
    history = train_head(head, target, windows, aux_feats, logps, cfg, log)
    train_s = time.perf_counter() - t0
    save_head(head, config, partial, cfg.save_dtype)
    del aux_feats, logps

    eval_prompts = data.function_prompts(split, tok, cfg.num_prompts, cfg.eval_prompt_tokens)
    meas = measure_head(target_dir, partial, eval_prompts, cfg, log)
    profile = acceptance_profile(
        meas["counts"], cfg.max_draft_len,
        source=(f"trtspec.zoo.eagle3: greedy chain speculative decoding, {target_dir.name} target + this EAGLE-3 "
                f"head, {cfg.num_prompts} held-out stdlib function prompts x {cfg.new_tokens} new tokens, "
                f"D={cfg.max_draft_len}, fp32 on CPU, Python {split.python}"))
    (partial / "acceptance.json").write_text(json.dumps(profile, indent=2) + "\n")
    result = {
        "config": asdict(cfg), "aux_layers": list(aux), "draft_vocab_size": draft_vocab,
        "draft_vocab_coverage": coverage, "params": sum(p.numel() for p in head.parameters()),
        "windows": {"selfgen": cfg.selfgen, "corpus": cfg.corpus, "seq_len": cfg.seq_len},
        "tokens_seen": cfg.steps * cfg.batch_size * cfg.seq_len,
        "history": history, "final_top1": history[-1]["top1"] if history else None,
        "acceptance": {"rates": profile["rates"], "measured_al_at_max_draft_len": profile["mean_al"],
                       "greedy_match": meas["greedy_match"], "num_prompts": cfg.num_prompts,
                       "new_tokens": cfg.new_tokens},
        "wall_s": {"train": train_s, "total": time.perf_counter() - t_start},
    }
    (partial / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    log(f"[eagle3] done in {result['wall_s']['total']:.0f}s -> {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    from . import DEMO_DIR

    p = argparse.ArgumentParser(prog="python -m trtspec.zoo.eagle3", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=Path, default=DEMO_DIR / "target", help="target HF directory (default: demo)")
    p.add_argument("--out", type=Path, default=None, help=f"output directory (default: {DEMO_DIR / 'eagle3'})")
    p.add_argument("--smoke", action="store_true", help="a few tiny steps (CI); requires --out")
    p.add_argument("--steps", type=int, default=None, help="override Eagle3TrainConfig.steps")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = p.parse_args(argv)
    if args.smoke and args.out is None:
        p.error("--smoke needs --out DIR (the smoke head must not replace the shipped one)")
    cfg = Eagle3TrainConfig.smoke() if args.smoke else Eagle3TrainConfig()
    if args.steps is not None:
        cfg = replace(cfg, steps=args.steps)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    result = run(cfg, args.target, args.out if args.out is not None else DEMO_DIR / "eagle3", log=log)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
