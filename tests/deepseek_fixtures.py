"""Tiny random DeepSeek-V3-layout checkpoints (MLA, dense + MoE layers, one MTP layer) for the runtime tests.

Written the way the shipped demo is (``trtspec.zoo.deepseek.save_checkpoint``): Hugging Face's
``DeepseekV3ForCausalLM`` for the main model and the MTP layer under ``model.layers.{num_hidden_layers}``,
with a byte-level tokenizer of :data:`runtime_fixtures.VOCAB` tokens.
"""
from __future__ import annotations

from pathlib import Path

import torch

from runtime_fixtures import VOCAB, byte_tokenizer


#: NVFP4-ready dimensions: every in-feature a multiple of 16 (the NVFP4 block).
QUANT_SHAPE = dict(hidden=64, heads=2, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                   v_head_dim=16, intermediate=64, moe_intermediate=32)


def tiny_config(*, vocab: int = VOCAB, q_lora_rank: int | None = 24, layers: int = 3, first_dense: int = 1,
                max_pos: int = 256, heads: int = 3, rope: dict | None = None, **shape):
    """A small DeepseekV3Config with awkward sizes (3 heads, 6 experts in 3 groups, top-2 of 2 groups);
    ``shape`` overrides other :class:`trtspec.zoo.deepseek.DeepseekShape` fields (e.g. :data:`QUANT_SHAPE`);
    ``rope`` replaces ``rope_parameters`` (e.g. DeepSeek-V3's YaRN)."""
    from trtspec.zoo.deepseek import DeepseekShape, DeepseekTrainConfig, hf_config

    dims = dict(hidden=48, heads=heads, q_lora_rank=q_lora_rank, kv_lora_rank=20, qk_nope_head_dim=10,
                qk_rope_head_dim=6, v_head_dim=12, intermediate=64, moe_intermediate=16)
    dims.update(shape)
    shape = DeepseekShape(layers=layers, first_k_dense=first_dense, n_routed_experts=6, n_shared_experts=1,
                          experts_per_tok=2, n_group=3, topk_group=2, routed_scaling_factor=1.7, **dims)
    cfg = DeepseekTrainConfig(max_position=max_pos, seq_len=min(64, max_pos), prompt_tokens=8, new_tokens=8,
                              max_draft_len=4)
    config = hf_config(shape, cfg, eos_id=0, vocab_size=vocab)
    if rope is not None:
        config.rope_parameters = rope
    return config


def randomize_(module: torch.nn.Module, g: torch.Generator, std: float) -> None:
    """Every matrix N(0, std), every norm weight 1 + N(0, 0.1), every router bias N(0, 0.05) (the bias then
    changes which experts are chosen)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std if p.dim() >= 2 else 1 + 0.1 * torch.randn(p.shape, generator=g))
        for name, b in module.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=g))


def hf_models(seed: int = 0, std: float = 0.15, **kw):
    """``(DeepseekV3ForCausalLM, MTPLayer)`` with random weights (float32, eval mode)."""
    from transformers import DeepseekV3ForCausalLM

    from trtspec.zoo.deepseek import _mtp_layer_class

    g = torch.Generator().manual_seed(seed)
    config = tiny_config(**kw)
    model = DeepseekV3ForCausalLM(config).eval()
    mtp = _mtp_layer_class()(config, config.num_hidden_layers).eval()
    randomize_(model, g, std)
    randomize_(mtp, g, std)
    return model, mtp


def make_deepseek(path: Path, *, seed: int = 0, std: float = 0.15, **kw) -> Path:
    """Save a random DeepSeek-V3-layout checkpoint with its MTP layer (float32) and a byte tokenizer."""
    from trtspec.zoo.deepseek import save_checkpoint

    model, mtp = hf_models(seed, std, **kw)
    path = Path(path)
    tok_dir = path.with_name(path.name + ".tok")
    tok_dir.mkdir(parents=True, exist_ok=True)
    byte_tokenizer(model.config.vocab_size).save(str(tok_dir / "tokenizer.json"))
    save_checkpoint(model, mtp, tok_dir, path, "float32", eos_id=0)
    return path
