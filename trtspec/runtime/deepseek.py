"""The DeepSeek-V3 layout in the runtime: the decoder (MLA + dense/MoE layers) and its MTP layers.

:class:`DeepseekTransformer` has the interface of :class:`trtspec.runtime.models.Transformer` (``new_cache``,
``embed``, ``forward``, ``logits``, ``quant``), so the engine, the verifiers and the drafters run it as they
run a Llama; its cache is the latent cache of :mod:`trtspec.runtime.mla`. ``capture`` ids are layer ids as
for a Llama, plus ``num_hidden_layers`` = the final, normed hidden state (what an MTP layer reads).

An MTP layer (DeepSeek-V3 §2.2; stored as ``model.layers.{num_hidden_layers + k}``), one step for the
token ``x_{t+1}`` and an input state ``h_t``::

    a = eh_proj(cat(enorm(embed(x_{t+1})), hnorm(h_t)))           # [2E] -> [E]
    h = decoder_layer(a)                                            # MLA + MoE, its own latent cache
    g = shared_head.norm(h);  logits = shared_head.head(g)         # g is the next step's h_{t+1}

``h_t`` is the target's final normed hidden state for the first draft and the layer's own ``g`` after
that (TensorRT-LLM's and SGLang's MTP modules return the ``shared_head.norm`` output, which the next
chained step reads; vLLM feeds the pre-norm state instead). Entry t sits at position t.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from trtspec.runtime.config import ModelFormatError, read_quant_config
from trtspec.runtime.deepseek_config import DeepseekConfig, read_deepseek_config
from trtspec.runtime.mla import LatentCache, MLAttention
from trtspec.runtime.models import RMSNorm, _load_into, rope_cos_sin
from trtspec.runtime.moe import MoE, SwiGLU
from trtspec.runtime.quant import QuantInfo, dequantize_checkpoint, install
from trtspec.runtime.weights import load_safetensors


class DeepseekLayer(nn.Module):
    """Pre-norm block: h += attn(norm(h)); h += mlp(norm(h)); ``mlp`` is a SwiGLU or a :class:`MoE`."""

    def __init__(self, cfg: DeepseekConfig, layer: int, cache_layer: int | None = None):
        super().__init__()
        self.self_attn = MLAttention(cfg, layer if cache_layer is None else cache_layer)
        self.mlp = MoE(cfg) if cfg.is_moe(layer) else SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos, sin, cache, rows, write_idx, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache, rows, write_idx, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


def _cache(cfg: DeepseekConfig, layers: int, rows: int, slots: int, like: torch.Tensor) -> LatentCache:
    return LatentCache(layers, rows, slots, cfg.kv_lora_rank, cfg.qk_rope_head_dim, device=like.device, dtype=like.dtype)


class DeepseekTransformer(nn.Module):
    """The DeepSeek-V3-layout decoder; parameter names match the checkpoint (``model.*``, ``lm_head``)."""

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.config = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.model.layers = nn.ModuleList(DeepseekLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.model.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.register_buffer("inv_freq", cfg.rope.inv_freq(cfg.qk_rope_head_dim), persistent=False)
        self.quant: QuantInfo | None = None

    def new_cache(self, rows: int, slots: int) -> LatentCache:
        return _cache(self.config, self.config.num_hidden_layers, rows, slots, self.lm_head.weight)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(tokens)

    def forward(self, tokens, positions, cache: LatentCache, rows, write_idx, mask, capture: tuple[int, ...] = ()):
        """As :meth:`trtspec.runtime.models.Transformer.forward`; ``capture`` may name ``num_hidden_layers``
        (the normed output). Returns (hidden ``[B, T, E]`` after the final norm, aux ``[B, T, k*E]`` or None)."""
        h = self.embed(tokens)
        cos, sin = rope_cos_sin(positions, self.inv_freq, h.dtype, self.config.rope.attention_scale())
        captured = {}
        for i, layer in enumerate(self.model.layers):
            h = layer(h, cos, sin, cache, rows, write_idx, mask)
            captured[i] = h
        captured[len(self.model.layers)] = out = self.model.norm(h)
        aux = torch.cat([captured[i] for i in capture], dim=-1) if capture else None
        return out, aux

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 ``[..., V]``."""
        return self.lm_head(hidden).float()


class MTPLayer(nn.Module):
    """One MTP module; names relative to ``model.layers.{num_hidden_layers + k}`` (``enorm``, ``hnorm``,
    ``eh_proj``, the decoder layer's own, ``shared_head.norm``, ``shared_head.head``, ``embed_tokens``)."""

    def __init__(self, cfg: DeepseekConfig, k: int = 0):
        super().__init__()
        E = cfg.hidden_size
        self.config = cfg
        self.enorm, self.hnorm = RMSNorm(E, cfg.rms_norm_eps), RMSNorm(E, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * E, E, bias=False)
        self.block = DeepseekLayer(cfg, cfg.num_hidden_layers + k, cache_layer=0)
        self.shared_head = nn.Module()
        self.shared_head.norm = RMSNorm(E, cfg.rms_norm_eps)
        self.shared_head.head = nn.Linear(E, cfg.vocab_size, bias=False)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, E)
        self.register_buffer("inv_freq", cfg.rope.inv_freq(cfg.qk_rope_head_dim), persistent=False)

    def new_cache(self, rows: int, slots: int) -> LatentCache:
        return _cache(self.config, 1, rows, slots, self.eh_proj.weight)

    def forward(self, tokens, h, positions, cache, rows, write_idx, mask):
        """tokens int64 ``[B, T]`` (x_{t+1}); h ``[B, T, E]`` (h_t); the rest as the decoder's forward.
        Returns (g ``[B, T, E]``, the next step's state, logits float32 ``[B, T, V]``)."""
        cos, sin = rope_cos_sin(positions, self.inv_freq, h.dtype, self.config.rope.attention_scale())
        a = self.eh_proj(torch.cat((self.enorm(self.embed_tokens(tokens)), self.hnorm(h)), dim=-1))
        g = self.shared_head.norm(self.block(a, cos, sin, cache, rows, write_idx, mask))
        return g, self.shared_head.head(g).float()

    def state_dict_names(self) -> dict[str, str]:
        """module parameter/buffer name -> checkpoint name relative to the layer prefix (``block.`` dropped)."""
        return {n: n.removeprefix("block.") for n in self.state_dict()}


def _load_tensors(model_dir: Path, quant_activations: bool):
    qcfg = read_quant_config(model_dir)
    tensors = load_safetensors(model_dir)
    if qcfg is None:
        return tensors, None, None
    return dequantize_checkpoint(tensors, qcfg, str(model_dir), activations=quant_activations)


@torch.no_grad()
def load_deepseek(model_dir: str | Path, *, device="cpu", dtype=torch.float32,
                  quant_activations: bool = True) -> DeepseekTransformer:
    """Load the decoder of a DeepSeek-V3-layout directory (its MTP layers stay on disk: :func:`load_mtp`).

    A Model-Optimizer checkpoint is dequantized as for a Llama (:mod:`trtspec.runtime.quant`)."""
    model_dir = Path(model_dir)
    cfg = read_deepseek_config(model_dir)
    tensors, plan, info = _load_tensors(model_dir, quant_activations)
    if "lm_head.weight" not in tensors:
        if not cfg.tie_word_embeddings:
            raise ModelFormatError(f"{model_dir}: lm_head.weight missing and tie_word_embeddings is false")
        tensors["lm_head.weight"] = tensors.get("model.embed_tokens.weight")
    model = DeepseekTransformer(cfg)
    _load_into(model, tensors, model_dir)
    if info is not None:
        main = [p for p in plan.acts if not p.startswith(f"model.layers.{cfg.num_hidden_layers}.")]
        plan.acts = {p: plan.acts[p] for p in main}
        install(model, plan)
        model.quant = dataclasses.replace(info, dtype=str(dtype).removeprefix("torch."))
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def load_mtp(model_dir: str | Path, target: DeepseekTransformer, *, k: int = 0, device="cpu", dtype=torch.float32,
             quant_activations: bool = True) -> MTPLayer:
    """Load MTP layer ``k`` (``model.layers.{num_hidden_layers + k}.*``) of ``model_dir``; ``embed_tokens`` and
    ``shared_head.head`` fall back to the target's embedding and head when the checkpoint leaves them out."""
    model_dir = Path(model_dir)
    cfg = target.config
    if not 0 <= k < cfg.num_nextn_predict_layers:
        raise ModelFormatError(f"{model_dir}: no MTP layer {k} (config num_nextn_predict_layers="
                               f"{cfg.num_nextn_predict_layers}); --drafter mtp needs a target with MTP layers")
    tensors, plan, _ = _load_tensors(model_dir, quant_activations)
    prefix = f"model.layers.{cfg.num_hidden_layers + k}."
    mtp = MTPLayer(cfg, k)
    names = mtp.state_dict_names()
    mine = {n: tensors[prefix + c] for n, c in names.items() if prefix + c in tensors}
    if not any(n.startswith("block.") for n in mine):
        raise ModelFormatError(f"{model_dir}: no MTP weights under {prefix}* (config num_nextn_predict_layers="
                               f"{cfg.num_nextn_predict_layers})")
    mine.setdefault("embed_tokens.weight", target.model.embed_tokens.weight.detach().cpu())
    mine.setdefault("shared_head.head.weight", target.lm_head.weight.detach().cpu())
    _load_into(mtp, mine, model_dir)
    if plan is not None:
        plan.acts = {"block." + p[len(prefix):] if not p[len(prefix):].startswith(("eh_proj", "shared_head"))
                     else p[len(prefix):]: a for p, a in plan.acts.items() if p.startswith(prefix)}
        install(mtp, plan)
    return mtp.to(device=device, dtype=dtype).eval()
