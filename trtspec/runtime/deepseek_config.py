"""The DeepSeek-V3 layout's ``config.json`` (offline; no transformers import): MLA, MoE, MTP layers.

Field names are DeepSeek-V3's own (as vLLM, SGLang and TensorRT-LLM read them). Supported: multi-head
latent attention with or without a low-rank query (``q_lora_rank`` null = a plain ``q_proj``), RoPE
on ``qk_rope_head_dim`` dims in DeepSeek's interleaved pairs (default or YaRN scaling), dense layers
below ``first_k_dense_replace`` and mixture-of-experts layers (every ``moe_layer_freq``-th) above it
with DeepSeek-V3's router (``scoring_func: sigmoid``, ``topk_method: noaux_tc``: sigmoid scores plus
``e_score_correction_bias`` choose ``topk_group`` of ``n_group`` groups, each scored by the sum of its
two best experts, then ``num_experts_per_tok`` experts among them, weighted by their bias-free scores,
normalised when ``norm_topk_prob``, times ``routed_scaling_factor``), and ``num_nextn_predict_layers``
MTP layers stored as ``model.layers.{num_hidden_layers + k}``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.runtime.config import ModelFormatError, RopeConfig, _eos, _read_json, _rope_from

DEEPSEEK_ARCHITECTURES = ("DeepseekV3ForCausalLM",)


@dataclass(frozen=True)
class DeepseekConfig:
    """One DeepSeek-V3-layout decoder. Sizes in elements, ``max_position_embeddings`` in tokens."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    moe_intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    n_group: int
    topk_group: int
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = True
    first_k_dense_replace: int = 0
    moe_layer_freq: int = 1
    num_nextn_predict_layers: int = 0
    rms_norm_eps: float = 1e-6
    rope: RopeConfig = field(default_factory=RopeConfig)
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                     "n_routed_experts", "num_experts_per_tok", "n_group", "topk_group", "moe_layer_freq",
                     "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ModelFormatError(f"config.{name} must be > 0, got {getattr(self, name)}")
        if self.q_lora_rank is not None and self.q_lora_rank <= 0:
            raise ModelFormatError(f"config.q_lora_rank must be > 0 or null, got {self.q_lora_rank}")
        if self.qk_rope_head_dim % 2:
            raise ModelFormatError(f"config.qk_rope_head_dim must be even, got {self.qk_rope_head_dim}")
        per_group, rem = divmod(self.n_routed_experts, self.n_group)
        if rem or per_group < 2:
            raise ModelFormatError(f"config.n_routed_experts={self.n_routed_experts} must split into n_group="
                                   f"{self.n_group} groups of >= 2 experts (a group is scored by its best two)")
        if not 1 <= self.topk_group <= self.n_group:
            raise ModelFormatError(f"config.topk_group must be in 1..n_group={self.n_group}, got {self.topk_group}")
        if self.num_experts_per_tok > self.topk_group * per_group:
            raise ModelFormatError(f"config.num_experts_per_tok={self.num_experts_per_tok} exceeds the "
                                   f"{self.topk_group * per_group} experts of the topk_group selected groups")
        if self.n_shared_experts < 0 or self.num_nextn_predict_layers < 0 or self.first_k_dense_replace < 0:
            raise ModelFormatError("config.n_shared_experts, num_nextn_predict_layers and first_k_dense_replace "
                                   "must be >= 0")

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """``qk_head_dim^-0.5``, times DeepSeek's YaRN ``mscale(factor, mscale_all_dim)^2`` under YaRN."""
        scale = self.qk_head_dim ** -0.5
        r = self.rope
        if r.kind == "yarn" and r.mscale_all_dim and r.factor > 1:
            m = 0.1 * r.mscale_all_dim * math.log(r.factor) + 1.0
            scale *= m * m
        return scale

    def is_moe(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` (MTP layers included: ``num_hidden_layers + k``) is a MoE layer."""
        return layer >= self.first_k_dense_replace and layer % self.moe_layer_freq == 0


def read_deepseek_config(model_dir: str | Path, cfg: dict | None = None) -> DeepseekConfig:
    """Parse ``model_dir/config.json`` of a DeepSeek-V3-layout model; a ModelFormatError naming the field otherwise."""
    model_dir = Path(model_dir)
    cfg = cfg if cfg is not None else _read_json(model_dir / "config.json")
    arch = next((a for a in cfg.get("architectures") or [] if a in DEEPSEEK_ARCHITECTURES), None)
    if arch is None:
        raise ModelFormatError(f"{model_dir}: architectures {cfg.get('architectures')!r} is not one of "
                               f"{DEEPSEEK_ARCHITECTURES}")
    scoring, method = cfg.get("scoring_func", "sigmoid"), cfg.get("topk_method", "noaux_tc")
    if scoring != "sigmoid" or method != "noaux_tc":
        raise ModelFormatError(f"{model_dir}: scoring_func={scoring!r}, topk_method={method!r} is not supported; the "
                               "runtime implements DeepSeek-V3's router (scoring_func 'sigmoid', topk_method 'noaux_tc')")
    if cfg.get("hidden_act", "silu") != "silu":
        raise ModelFormatError(f"{model_dir}: hidden_act {cfg['hidden_act']!r} is not supported (expected 'silu')")
    if cfg.get("attention_bias"):
        raise ModelFormatError(f"{model_dir}: attention_bias true is not supported for MLA")
    if cfg.get("rope_interleave") is False:
        raise ModelFormatError(f"{model_dir}: rope_interleave false is not supported (DeepSeek checkpoints rotate "
                               "interleaved pairs, as the serving engines assume)")
    try:
        q_lora = cfg.get("q_lora_rank")
        return DeepseekConfig(
            architecture=arch, vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]), moe_intermediate_size=int(cfg["moe_intermediate_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]), num_attention_heads=int(cfg["num_attention_heads"]),
            q_lora_rank=None if q_lora is None else int(q_lora), kv_lora_rank=int(cfg["kv_lora_rank"]),
            qk_nope_head_dim=int(cfg["qk_nope_head_dim"]), qk_rope_head_dim=int(cfg["qk_rope_head_dim"]),
            v_head_dim=int(cfg["v_head_dim"]), n_routed_experts=int(cfg["n_routed_experts"]),
            n_shared_experts=int(cfg.get("n_shared_experts") or 0), num_experts_per_tok=int(cfg["num_experts_per_tok"]),
            n_group=int(cfg.get("n_group") or 1), topk_group=int(cfg.get("topk_group") or 1),
            routed_scaling_factor=float(cfg.get("routed_scaling_factor", 1.0)),
            norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
            first_k_dense_replace=int(cfg.get("first_k_dense_replace", 0)),
            moe_layer_freq=int(cfg.get("moe_layer_freq", 1)),
            num_nextn_predict_layers=int(cfg.get("num_nextn_predict_layers") or 0),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope=_rope_from(cfg),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)), eos_token_ids=_eos(cfg))
    except KeyError as e:
        raise ModelFormatError(f"{model_dir}/config.json: missing field {e.args[0]!r} of the DeepSeek-V3 layout") from None
