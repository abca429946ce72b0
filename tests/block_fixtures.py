"""Random DFlash / DSpark heads in NVIDIA Model-Optimizer's export layout, for the runtime tests."""
from __future__ import annotations

import json
from pathlib import Path

import torch


def make_block_head(path: Path, target_dir: Path, *, drafter: str = "dflash", block_size: int = 4,
                    layer_ids=(0, 1), mask_token_id: int = 3, seed: int = 0, init: float = 0.2,
                    markov_head: str = "vanilla", markov_rank: int = 8, confidence: bool = True,
                    causal: bool = False, intermediate: int | None = None, config_overrides: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` of a random head for the target in ``target_dir``."""
    from safetensors.torch import save_file

    t = json.loads((Path(target_dir) / "config.json").read_text())
    E, H, Hkv, V = t["hidden_size"], t["num_attention_heads"], t["num_key_value_heads"], t["vocab_size"]
    d = t.get("head_dim") or E // H
    inter = intermediate or t["intermediate_size"]
    g = torch.Generator().manual_seed(seed)

    def w(*shape, scale=init):
        return (scale * torch.randn(*shape, generator=g)).contiguous()

    def norm(n):
        return (1.0 + 0.2 * torch.randn(n, generator=g)).contiguous()

    sd = {"fc.weight": w(E, len(layer_ids) * E), "hidden_norm.weight": norm(E), "norm.weight": norm(E)}
    for i in range(len(layer_ids)):
        p = f"layers.{i}."
        sd.update({p + "self_attn.q_proj.weight": w(H * d, E), p + "self_attn.k_proj.weight": w(Hkv * d, E),
                   p + "self_attn.v_proj.weight": w(Hkv * d, E), p + "self_attn.o_proj.weight": w(E, H * d),
                   p + "self_attn.q_norm.weight": norm(d), p + "self_attn.k_norm.weight": norm(d),
                   p + "mlp.gate_proj.weight": w(inter, E), p + "mlp.up_proj.weight": w(inter, E),
                   p + "mlp.down_proj.weight": w(E, inter), p + "input_layernorm.weight": norm(E),
                   p + "post_attention_layernorm.weight": norm(E)})
    dc = {"mask_token_id": mask_token_id, "target_layer_ids": list(layer_ids), "causal": causal}
    if drafter == "dspark":
        r = markov_rank
        sd.update({"markov_w1.weight": w(V, r, scale=1.0), "markov_w2.weight": w(V, r, scale=0.5)})
        if markov_head == "gated":
            sd.update({"gate_proj.weight": w(r, E + r), "gate_proj.bias": w(r)})
        elif markov_head == "rnn":
            sd.update({"joint_proj.weight": w(3 * r, 2 * r + E), "joint_proj.bias": w(3 * r)})
        if confidence:
            sd.update({"confidence_proj.weight": w(1, E + r), "confidence_proj.bias": w(1)})
        dc.update({"projector_type": "dspark", "shift_label": True, "markov_rank": r, "markov_head_type": markov_head,
                   "use_confidence_head": confidence})
    rope = t.get("rope_parameters") or {}
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "block_size": block_size, "dflash_config": dc,
        "hidden_size": E, "num_hidden_layers": len(layer_ids), "num_attention_heads": H, "num_key_value_heads": Hkv,
        "head_dim": d, "intermediate_size": inter, "hidden_act": "silu", "rms_norm_eps": t.get("rms_norm_eps", 1e-6),
        "vocab_size": V, "max_position_embeddings": t["max_position_embeddings"], "attention_bias": False,
        "rope_theta": rope.get("rope_theta", 10000.0), "rope_scaling": None, "tie_word_embeddings": False,
        "torch_dtype": "float32", "num_target_layers": t["num_hidden_layers"],
        "layer_types": ["full_attention"] * len(layer_ids),
    }
    config.update(config_overrides or {})
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def target_features(target, ids: list[int], layer_ids) -> torch.Tensor:
    """Target layer outputs ``[len(ids), k*E]`` of ``ids`` at ``layer_ids`` (no cache reuse)."""
    from trtspec.runtime import masks

    T = len(ids)
    cache = target.new_cache(1, T + 1)
    zero = torch.zeros(1, dtype=torch.int64)
    positions, write_idx, mask = masks.chain_block(zero, torch.tensor([T]), T, cache.slots)
    with torch.no_grad():
        _, aux = target(torch.tensor([ids]), positions, cache, zero, write_idx, mask, tuple(layer_ids))
    return aux[0]
