"""The target as a ``transformers`` model, converted by ``modelopt.torch.speculative.convert``.

EAGLE-3 is ``("eagle", {...})`` with an ``eagle_architecture_config`` sized from the target; DFlash and DSpark
are ``("dflash", {...})`` (DSpark: ``projector_type: dspark`` in ``dflash_architecture_config``). Every size is
given explicitly: Model-Optimizer's EAGLE defaults (14336 intermediate, 32 heads, YaRN rope at export) are a
Llama-3-8B's, and its DFlash config does not inherit most of them. Settings that matter on a CPU: no
torch.compile, and no rope scaling injected at export (the draft is deployed with the rope it was trained with).
"""
from __future__ import annotations

import copy

from trtspec.train.config import TrainDraftConfig
from trtspec.train.derive import Derived, TargetInfo


def eagle_config(cfg: TrainDraftConfig, t: TargetInfo, d: Derived) -> dict:
    """``mtsp.convert`` config of an EAGLE-3 head for target ``t``."""
    from modelopt.torch.speculative.config import eagle3_default_config

    arch = copy.deepcopy(eagle3_default_config)
    arch.update({
        "num_hidden_layers": 1, "intermediate_size": d.intermediate, "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads, "head_dim": t.head_dim, "rms_norm_eps": t.rms_norm_eps,
        "rope_theta": t.rope_theta, "rope_scaling": {"rope_type": "default", "rope_theta": t.rope_theta},
        "eagle_aux_hidden_state_layer_ids": list(d.layer_ids), "draft_vocab_size": d.draft_vocab,
        "use_aux_hidden_state": True, "use_last_layernorm": True, "torch_dtype": "float32",
    })
    return {"eagle_architecture_config": arch, "eagle_use_torch_compile": False, "eagle_ttt_steps": cfg.ttt_steps,
            "eagle_export_rope_scaling": {}, "eagle_self_logit_distillation": True, "eagle_freeze_base_model": True}


def dflash_config(cfg: TrainDraftConfig, t: TargetInfo, d: Derived) -> dict:
    """``mtsp.convert`` config of a DFlash (or DSpark) head for target ``t``."""
    arch = {
        "num_hidden_layers": d.draft_layers, "intermediate_size": d.intermediate, "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads, "head_dim": t.head_dim, "rms_norm_eps": t.rms_norm_eps,
        "max_position_embeddings": t.config.get("max_position_embeddings", 2048), "rope_theta": t.rope_theta,
        "target_layer_ids": list(d.layer_ids), "hidden_act": "silu", "attention_bias": False,
        "_attn_implementation": "sdpa",
    }
    out = {"dflash_block_size": cfg.block_size, "dflash_mask_token_id": d.mask_token_id,
           "dflash_use_torch_compile": False, "dflash_self_logit_distillation": True,
           "dflash_export_rope_scaling": {}, **({"dflash_num_anchors": cfg.anchors} if cfg.anchors else {}),
           "dflash_architecture_config": arch}
    if cfg.drafter == "dspark":
        arch.update({"projector_type": "dspark", "markov_rank": cfg.markov_rank, "markov_head_type": cfg.markov_head,
                     "use_confidence_head": cfg.confidence_head})
        out["dflash_confidence_head_alpha"] = 0.1 if cfg.confidence_head else 0.0
    return out


def load_target(t: TargetInfo, device: str):
    """The target as a float32 ``transformers`` causal LM (``architectures`` set, as Model-Optimizer needs)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(t.path), dtype=torch.float32)
    if not getattr(model.config, "architectures", None):
        model.config.architectures = [type(model).__name__]
    return model.to(device)


def convert(model, cfg: TrainDraftConfig, t: TargetInfo, d: Derived, *, draft_ids=None, d2t=None) -> dict:
    """Convert ``model`` in place for ``cfg.drafter``; returns the convert config used (recorded in the output).

    EAGLE-3 with a reduced draft vocabulary: ``d2t`` is set, and the head's lm_head and norm start from the
    target's rows for ``draft_ids`` (its output layer, restricted)."""
    import torch
    import modelopt.torch.speculative as mtsp

    from trtspec.train import compat

    compat.rotary_without_device()
    if cfg.drafter == "eagle3":
        conf = eagle_config(cfg, t, d)
        mtsp.convert(model, [("eagle", copy.deepcopy(conf))])
        em = model.eagle_module
        compat.single_hidden_norm(em)
        with torch.no_grad():
            if hasattr(em, "d2t") and d2t is not None:
                em.d2t.copy_(d2t)
            if hasattr(em, "lm_head") and draft_ids is not None:
                em.lm_head.weight.copy_(model.lm_head.weight[draft_ids.to(model.lm_head.weight.device)])
            em.norm.weight.copy_(model.model.norm.weight)
        return conf
    conf = dflash_config(cfg, t, d)
    mtsp.convert(model, [("dflash", copy.deepcopy(conf))])
    return conf


def draft_parameters(model):
    """The trainable draft parameters (Model-Optimizer froze the base model)."""
    return [p for n, p in model.named_parameters() if p.requires_grad]
