"""Train the second demo target: the DeepSeek-V3 layout (MLA, MoE, one MTP layer) on the standard library.

    python -m trtspec.zoo.train --arch deepseek-v3            # full run into trtspec/zoo/deepseek (+ its card)
    python -m trtspec.zoo.train --arch deepseek-v3 --smoke --out /tmp/ds   # tiny run, for CI

Same corpus split (:mod:`trtspec.zoo.data`) and the same tokenizer (copied from the demo target) as the
demo pair. The model is Hugging Face's ``DeepseekV3ForCausalLM``: multi-head latent attention with a
low-rank query (``q_lora_rank``) and a compressed KV latent (``kv_lora_rank`` + a shared RoPE key of
``qk_rope_head_dim``), the first ``first_k_dense`` layers dense and the rest mixture-of-experts (routed +
shared experts, sigmoid scores, the grouped top-k router of ``n_group`` / ``topk_group`` with
``e_score_correction_bias``, weights scaled by ``routed_scaling_factor``), and ``num_nextn_predict_layers: 1``.

Training (deterministic: seeded windows, one thread, float32):

1. **joint** -- the main model and the MTP module together, DeepSeek-V3's objective (arXiv 2412.19437 §2.2):
   ``L = CE(main) + lambda * CE(MTP)``; the MTP module at position i reads ``hnorm(h_i)`` (the main model's
   final, normed hidden state) and ``enorm(embed(x_{i+1}))``, ``eh_proj`` fuses them, one decoder layer
   (MoE, layer index ``num_hidden_layers``) and ``shared_head.norm`` follow, and the shared output head
   predicts ``x_{i+2}``. Expert balance is DeepSeek-V3's auxiliary-loss-free rule: after every step each
   MoE router's ``e_score_correction_bias`` moves by ``bias_update_speed`` towards the mean load
   (``+`` for under-loaded experts, ``-`` for over-loaded ones).
2. **mtp distillation** -- the main model frozen, the MTP module alone learns the main model's own
   distribution of ``x_{i+2}`` (KL on the same kind of windows): what a drafter must agree with.

Saved as the serving engines load DeepSeek-V3 checkpoints: the main model under ``model.*`` / ``lm_head``
(experts unfused, ``model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj``) and the MTP layer under
``model.layers.{num_hidden_layers}.*`` with ``enorm``, ``hnorm``, ``eh_proj``, the decoder layer's own
names, ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens`` (copies of the main model's head and
embedding, as DeepSeek-V3's checkpoint stores them). Weights in bfloat16, the routers'
``e_score_correction_bias`` in float32. Measurement (held-out loss, MTP acceptance by D, CPU speed) is
:mod:`trtspec.zoo.deepseek_eval`.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ARCHITECTURE = "DeepseekV3ForCausalLM"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class DeepseekShape:
    """DeepSeek-V3 dimensions (names as in its ``config.json``). In-features stay multiples of 16 (NVFP4 blocks)."""

    hidden: int = 192
    layers: int = 4
    heads: int = 6
    q_lora_rank: int | None = 96
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    intermediate: int = 512          # dense layers' MLP
    moe_intermediate: int = 64       # each routed expert and (times n_shared_experts) the shared expert
    first_k_dense: int = 1
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    experts_per_tok: int = 2
    n_group: int = 4
    topk_group: int = 2
    routed_scaling_factor: float = 2.5

    def __post_init__(self):
        for name in ("hidden", "layers", "heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "intermediate", "moe_intermediate", "n_routed_experts", "experts_per_tok", "n_group", "topk_group"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.first_k_dense < self.layers:
            raise ValueError(f"first_k_dense must be in 0..layers-1 (at least one MoE layer), got {self.first_k_dense}")
        if self.n_routed_experts % self.n_group:
            raise ValueError(f"n_routed_experts ({self.n_routed_experts}) must be divisible by n_group ({self.n_group})")
        if not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"topk_group must be in 1..n_group={self.n_group}, got {self.topk_group}")
        if self.experts_per_tok > self.topk_group * self.n_routed_experts // self.n_group:
            raise ValueError("experts_per_tok exceeds the experts of the topk_group selected groups")
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even, got {self.qk_rope_head_dim}")


@dataclass(frozen=True)
class DeepseekTrainConfig:
    """Everything that determines the shipped model; defaults are the full run, :meth:`smoke` the CI run.

    ``steps`` joint steps of ``batch_size`` windows of ``seq_len`` tokens, then ``mtp_distill_steps``
    MTP-only steps; ``mtp_lambda`` weighs the MTP loss (DeepSeek-V3: 0.3 for its first 10T tokens);
    ``bias_update_speed`` is the auxiliary-loss-free balancing step (DeepSeek-V3: 0.001 over its 14.8T tokens;
    10x that here, where the whole run is 600 steps and one expert otherwise takes most tokens early). Learning rates:
    linear warmup then cosine to ``lr * min_lr_ratio`` in each stage. ``autocast_bf16`` defaults to False:
    on this project's CPUs (no AVX512-BF16) bfloat16 autocast made a step about 6x slower.
    """

    seed: int = 0
    threads: int = 1
    heldout_modulus: int = 20
    max_files: int | None = None
    seq_len: int = 256
    max_position: int = 512
    batch_size: int = 8
    shape: DeepseekShape = field(default_factory=DeepseekShape)
    steps: int = 600
    mtp_distill_steps: int = 150
    mtp_lambda: float = 0.3
    bias_update_speed: float = 0.01
    autocast_bf16: bool = False
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
    speed_prompts: int = 8

    def __post_init__(self):
        for name in ("threads", "seq_len", "batch_size", "steps", "eval_windows", "num_prompts", "prompt_tokens",
                     "new_tokens", "max_draft_len", "speed_prompts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.mtp_distill_steps < 0 or self.warmup < 0:
            raise ValueError("mtp_distill_steps and warmup must be >= 0")
        if self.seq_len > self.max_position:
            raise ValueError(f"seq_len ({self.seq_len}) must be <= max_position ({self.max_position})")
        if self.prompt_tokens + self.new_tokens + self.max_draft_len + 1 > self.max_position:
            raise ValueError("prompt_tokens + new_tokens + max_draft_len + 1 must fit in max_position")
        if self.save_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"save_dtype: expected 'float32' or 'bfloat16', got {self.save_dtype!r}")
        if not 0 < self.lr < 1 or not 0 <= self.min_lr_ratio <= 1 or self.mtp_lambda < 0 or self.bias_update_speed < 0:
            raise ValueError("lr must be in (0, 1), min_lr_ratio in [0, 1], mtp_lambda and bias_update_speed >= 0")

    @classmethod
    def smoke(cls) -> "DeepseekTrainConfig":
        """A few steps of a tiny model on 24 files: the pipeline end to end in about a minute."""
        shape = DeepseekShape(hidden=64, layers=2, heads=2, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16,
                              qk_rope_head_dim=16, v_head_dim=16, intermediate=128, moe_intermediate=32,
                              n_routed_experts=4, n_group=2, topk_group=1)
        return cls(max_files=24, seq_len=64, max_position=256, batch_size=4, shape=shape, steps=12,
                   mtp_distill_steps=6, warmup=2, eval_windows=4, num_prompts=2, prompt_tokens=32, new_tokens=16,
                   max_draft_len=3, speed_prompts=1)


def hf_config(shape: DeepseekShape, cfg: DeepseekTrainConfig, eos_id: int, vocab_size: int):
    """The ``DeepseekV3Config`` of the model, with DeepSeek-V3's own router keys (``topk_method: noaux_tc``,
    ``scoring_func: sigmoid``, ``moe_layer_freq``) that vLLM, SGLang and TensorRT-LLM read."""
    from transformers import DeepseekV3Config

    c = DeepseekV3Config(
        vocab_size=vocab_size, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        moe_intermediate_size=shape.moe_intermediate, num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads, num_key_value_heads=shape.heads, n_shared_experts=shape.n_shared_experts,
        n_routed_experts=shape.n_routed_experts, routed_scaling_factor=shape.routed_scaling_factor,
        kv_lora_rank=shape.kv_lora_rank, q_lora_rank=shape.q_lora_rank, qk_rope_head_dim=shape.qk_rope_head_dim,
        v_head_dim=shape.v_head_dim, qk_nope_head_dim=shape.qk_nope_head_dim, n_group=shape.n_group,
        topk_group=shape.topk_group, num_experts_per_tok=shape.experts_per_tok,
        first_k_dense_replace=shape.first_k_dense, norm_topk_prob=True, max_position_embeddings=cfg.max_position,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, rope_interleave=True,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
        num_nextn_predict_layers=1, topk_method="noaux_tc", scoring_func="sigmoid", moe_layer_freq=1, ep_size=1,
    )
    c.architectures = [ARCHITECTURE]
    return c


def _mtp_layer_class():
    """``MTPLayer`` (built on first use: it subclasses ``torch.nn.Module`` and uses transformers' layers)."""
    import torch
    from torch import nn
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm

    class MTPLayer(nn.Module):
        """One DeepSeek-V3 MTP module for training: ``shared_head.norm(block(eh_proj([enorm(e); hnorm(h)])))``."""

        def __init__(self, config, layer_idx: int):
            super().__init__()
            H, eps = config.hidden_size, config.rms_norm_eps
            self.layer_idx = layer_idx
            self.enorm, self.hnorm = DeepseekV3RMSNorm(H, eps), DeepseekV3RMSNorm(H, eps)
            self.eh_proj = nn.Linear(2 * H, H, bias=False)
            self.block = DeepseekV3DecoderLayer(config, layer_idx)
            self.head_norm = DeepseekV3RMSNorm(H, eps)

        def forward(self, hidden, next_embeds, position_embeddings):
            """hidden ``[B, T, E]`` (main model, normed) at positions i, next_embeds ``[B, T, E]`` of x_{i+1}."""
            x = self.eh_proj(torch.cat([self.enorm(next_embeds), self.hnorm(hidden)], dim=-1))
            return self.head_norm(self.block(x, position_embeddings=position_embeddings))

    return MTPLayer


def _init_(module, std: float) -> None:
    """HF-style init for modules built outside ``from_pretrained``: every matrix N(0, std), norms 1, router bias 0."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std)
            else:
                p.fill_(1.0)
        for name, b in module.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.zero_()


def mtp_tensors(mtp, prefix: str, embed, head) -> dict:
    """The MTP layer's checkpoint tensors under ``prefix`` (``model.layers.{N}.``), experts unfused."""
    out = {f"{prefix}enorm.weight": mtp.enorm.weight, f"{prefix}hnorm.weight": mtp.hnorm.weight,
           f"{prefix}eh_proj.weight": mtp.eh_proj.weight, f"{prefix}shared_head.norm.weight": mtp.head_norm.weight,
           f"{prefix}shared_head.head.weight": head, f"{prefix}embed_tokens.weight": embed}
    for name, t in list(mtp.block.state_dict().items()):
        if name == "mlp.experts.gate_up_proj":                  # [E, 2I, H]: gate rows first, then up
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{prefix}mlp.experts.{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{prefix}mlp.experts.{e}.up_proj.weight"] = t[e, inter:]
        elif name == "mlp.experts.down_proj":                   # [E, H, I]
            for e in range(t.shape[0]):
                out[f"{prefix}mlp.experts.{e}.down_proj.weight"] = t[e]
        else:
            out[prefix + name] = t
    return {k: v.detach() for k, v in out.items()}


class _LoadBalancer:
    """DeepSeek-V3's auxiliary-loss-free balancing: count each router's expert choices during a step, then
    ``bias += speed * sign(mean_load - load)``."""

    def __init__(self, modules, speed: float):
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

        self.routers = [m for mod in modules for m in mod.modules() if isinstance(m, DeepseekV3TopkRouter)]
        self.speed, self.counts, self.active = speed, {}, False
        for r in self.routers:
            r.register_forward_hook(self._hook)

    def _hook(self, router, inputs, out):
        if self.active:
            import torch

            c = torch.bincount(out[2].flatten(), minlength=router.num_experts).float()
            self.counts[router] = self.counts.get(router, 0) + c

    def update(self) -> float:
        """Apply the rule; returns the worst max/mean load ratio of the step (1 = balanced)."""
        import torch

        worst = 1.0
        with torch.no_grad():
            for r, c in self.counts.items():
                r.e_score_correction_bias += self.speed * torch.sign(c.mean() - c)
                worst = max(worst, float(c.max() / c.mean().clamp_min(1)))
        self.counts = {}
        return worst


def _mtp_inputs(model, x):
    """Embeddings of x_{i+1} and RoPE (cos, sin) of positions i = 0..S-2 for the MTP module."""
    import torch

    emb = model.model.embed_tokens(x[:, 1:])                                       # [B, S-1, E]
    pos = torch.arange(x.shape[1] - 1, device=x.device)[None]
    return emb, model.model.rotary_emb(emb, pos)


def train_joint(model, mtp, stream, cfg: DeepseekTrainConfig, log) -> dict:
    """Stage 1: CE(main) + lambda * CE(MTP), all parameters, load balancing on. Returns the loss curves."""
    import torch
    import torch.nn.functional as F

    from .train import _batches, _lr_at, _optimizer

    params = torch.nn.ModuleList([model, mtp])
    opt = _optimizer(params, cfg)
    balancer = _LoadBalancer([model, mtp], cfg.bias_update_speed)
    losses, mtp_losses, imbalance = [], [], []
    model.train(), mtp.train()
    t0 = time.perf_counter()
    for step, batch in enumerate(_batches(stream, cfg, cfg.steps, cfg.seed + 1)):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg.steps, cfg)
        x, y = batch[:, :-1], batch[:, 1:]
        balancer.active = True
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast_bf16):
            h = model.model(input_ids=x).last_hidden_state                         # [B, S, E] normed
            logits = model.lm_head(h).float()
            emb, pe = _mtp_inputs(model, x)
            m_logits = model.lm_head(mtp(h[:, :-1], emb, pe)).float()             # predicts x_{i+2}
        balancer.active = False
        main = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        extra = F.cross_entropy(m_logits.flatten(0, 1), y[:, 1:].flatten())
        loss = main + cfg.mtp_lambda * extra
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.parameters(), 1.0)
        opt.step()
        imbalance.append(balancer.update())
        losses.append(main.item())
        mtp_losses.append(extra.item())
        if step % 25 == 0 or step == cfg.steps - 1:
            el = time.perf_counter() - t0
            log(f"[joint] step {step + 1}/{cfg.steps} loss {_tail(losses):.4f} mtp {_tail(mtp_losses):.4f} "
                f"max/mean expert load {_tail(imbalance):.2f} {el:.0f}s ({(step + 1) / el:.2f} steps/s)")
    model.eval(), mtp.eval()
    return {"main": losses, "mtp": mtp_losses, "imbalance": imbalance}


def distill_mtp(model, mtp, stream, cfg: DeepseekTrainConfig, log) -> list[float]:
    """Stage 2: the main model frozen; KL(main's distribution of x_{i+2} || MTP's) on training windows."""
    import torch
    import torch.nn.functional as F

    from .train import _batches, _lr_at, _optimizer

    if cfg.mtp_distill_steps == 0:
        return []
    for p in model.parameters():
        p.requires_grad_(False)
    opt = _optimizer(mtp, cfg)
    balancer = _LoadBalancer([mtp], cfg.bias_update_speed)
    losses = []
    mtp.train()
    t0 = time.perf_counter()
    for step, batch in enumerate(_batches(stream, cfg, cfg.mtp_distill_steps, cfg.seed + 2)):
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, cfg.mtp_distill_steps, cfg)
        x = batch[:, :-1]
        with torch.no_grad():
            h = model.model(input_ids=x).last_hidden_state
            t_logp = F.log_softmax(model.lm_head(h[:, 1:]).float(), -1)           # main's view of x_{i+2}
            emb, pe = _mtp_inputs(model, x)
        balancer.active = True
        m_logp = F.log_softmax(model.lm_head(mtp(h[:, :-1], emb, pe)).float(), -1)
        balancer.active = False
        loss = F.kl_div(m_logp.flatten(0, 1), t_logp.flatten(0, 1), log_target=True, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        balancer.update()
        losses.append(loss.item())
        if step % 25 == 0 or step == cfg.mtp_distill_steps - 1:
            el = time.perf_counter() - t0
            log(f"[mtp-distill] step {step + 1}/{cfg.mtp_distill_steps} KL {_tail(losses):.4f} {el:.0f}s")
    mtp.eval()
    return losses


def save_checkpoint(model, mtp, tok_dir: Path, out_dir: Path, dtype: str, eos_id: int) -> None:
    """Main model + MTP layer into one ``model.safetensors`` (DeepSeek-V3 names), config, tokenizer files."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import GenerationConfig

    out_dir.mkdir(parents=True, exist_ok=True)
    scratch = out_dir / ".hf"
    model.save_pretrained(scratch, safe_serialization=True)                       # unfuses the experts
    tensors = load_file(str(scratch / "model.safetensors"))
    n = model.config.num_hidden_layers
    tensors.update(mtp_tensors(mtp, f"model.layers.{n}.", model.model.embed_tokens.weight, model.lm_head.weight))
    cast = getattr(torch, dtype)
    tensors = {k: (v.float() if k.endswith("e_score_correction_bias") else v.to(cast)).contiguous()
               for k, v in sorted(tensors.items())}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "model.safetensors").chmod(0o644)
    config = json.loads((scratch / "config.json").read_text())
    config["dtype"] = dtype
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(scratch)
    GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, do_sample=False,
                     max_new_tokens=64).save_pretrained(out_dir)
    for f in TOKENIZER_FILES:
        if (tok_dir / f).is_file():
            shutil.copy2(tok_dir / f, out_dir / f)


def run(cfg: DeepseekTrainConfig, out: Path, card: Path | None = None, log=print, tokenizer_dir: Path | None = None,
        measure: bool = True) -> dict:
    """Train and save into ``out`` (via ``out.partial``), then measure (:mod:`trtspec.zoo.deepseek_eval`) and
    write ``measurements.json``, ``acceptance.json`` and the card. Returns the measurements."""
    import torch
    from tokenizers import Tokenizer
    from transformers import DeepseekV3ForCausalLM

    from . import DEMO_DIR, data

    out = Path(out)
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    tok_dir = Path(tokenizer_dir) if tokenizer_dir is not None else DEMO_DIR / "target"
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    eos_id = tok.token_to_id(data.EOS_TOKEN)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    split = data.CorpusSplit.build(heldout_modulus=cfg.heldout_modulus, max_files=cfg.max_files)
    train_stream = data.encode_corpus(tok, split.read("train"))
    log(f"corpus: {len(split.train)} train files ({train_stream.numel()} tokens), {len(split.heldout)} held out")

    torch.manual_seed(cfg.seed)
    model = DeepseekV3ForCausalLM(hf_config(cfg.shape, cfg, eos_id, tok.get_vocab_size()))
    mtp = _mtp_layer_class()(model.config, cfg.shape.layers)
    _init_(mtp, model.config.initializer_range)
    t0, c0 = time.perf_counter(), time.process_time()
    curves = train_joint(model, mtp, train_stream, cfg, log)
    joint_s, joint_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    distill = distill_mtp(model, mtp, train_stream, cfg, log)
    distill_s, distill_cpu = time.perf_counter() - t0, time.process_time() - c0
    save_checkpoint(model, mtp, tok_dir, partial, cfg.save_dtype, eos_id)
    n_params = {"main": sum(p.numel() for p in model.parameters()), "mtp": sum(p.numel() for p in mtp.parameters())}
    train_info = {
        "config": asdict(cfg), "corpus": {**split.summary(), "train_tokens": int(train_stream.numel())},
        "tokenizer": {"copied_from": "trtspec/zoo/demo/target", "vocab_size": tok.get_vocab_size()},
        "params": n_params,
        "tokens_seen": {"joint": cfg.steps * cfg.batch_size * cfg.seq_len,
                        "mtp_distill": cfg.mtp_distill_steps * cfg.batch_size * cfg.seq_len},
        "final_train_loss": {"main": _tail(curves["main"]), "mtp": _tail(curves["mtp"]),
                             "mtp_distill_kl": _tail(distill) if distill else None},
        "expert_load_max_over_mean": {"first_25_steps": _head(curves["imbalance"]), "last_25_steps": _tail(curves["imbalance"])},
        "wall_s": {"joint": joint_s, "mtp_distill": distill_s, "train": time.perf_counter() - t_start},
        "cpu_s": {"joint": joint_cpu, "mtp_distill": distill_cpu},
    }
    (partial / "training.json").write_text(json.dumps(train_info, indent=2) + "\n")
    del model, mtp
    result = train_info
    if measure:
        from .deepseek_eval import finish

        t0 = time.perf_counter()
        result = finish(partial, cfg, split, tok, log=log)
        result["wall_s"]["measure"] = time.perf_counter() - t0
        result["wall_s"]["total"] = time.perf_counter() - t_start
        (partial / "measurements.json").write_text(json.dumps(result, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    if card is not None and measure:
        from .deepseek_card import write_card

        write_card(out, card)
    log(f"done in {time.perf_counter() - t_start:.0f}s -> {out}")
    return result


def _tail(values: list[float], n: int = 25) -> float | None:
    return sum(values[-n:]) / len(values[-n:]) if values else None


def _head(values: list[float], n: int = 25) -> float | None:
    return sum(values[:n]) / len(values[:n]) if values else None
