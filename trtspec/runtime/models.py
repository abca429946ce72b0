"""A compact Llama-family decoder (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM) with a static KV cache.

One forward serves prefill, plain decoding and tree verification. The caller says, per new token,
where its K/V goes in the cache (``write_idx``) and which cache slots it may attend to (``mask``);
so a tree of N nodes appended at ``cache_len`` is just ``write_idx = cache_len + i``,
``positions = cache_len + depth(i)`` and ``mask = prefix | ancestors`` (see :mod:`trtspec.runtime.masks`).

Shapes: B requests, T new tokens, S cache slots per request, H query heads, Hkv KV heads,
d head dim, V vocabulary, E hidden size.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.config import (Eagle3Config, ModelConfig, ModelFormatError, read_eagle3_config, read_model_config,
                                    read_quant_config)
from trtspec.runtime.quant import QuantInfo, dequantize_checkpoint, fp8_roundtrip, install
from trtspec.runtime.weights import load_safetensors


class KVCache:
    """Static KV cache: ``k, v`` float ``[layers, rows, Hkv, S, d]``. A request owns one row; the
    engine keeps its length (tokens whose K/V are final). Slots past the length are scratch."""

    def __init__(self, layers: int, rows: int, kv_heads: int, slots: int, head_dim: int, *, device, dtype):
        shape = (layers, rows, kv_heads, slots, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def slots(self) -> int:
        return self.k.shape[3]

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slot ``src[b, i]`` to ``dst[b, i]`` in row ``rows[b]`` for every layer; -1 entries are skipped.

        rows int64 ``[B]``; src, dst int ``[B, L]``. Sources are gathered before any write, so
        overlapping moves (the accepted path sliding left) are safe.
        """
        keep = src >= 0
        if not bool(keep.any()):
            return
        r = rows[:, None].expand_as(src)[keep]
        s, t = src[keep].long(), dst[keep].long()
        for cache in (self.k, self.v):
            cache[:, r, :, t] = cache[:, r, :, s].clone()   # [layers, M, Hkv, d]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim, computed in float32."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype, scale: float = 1.0):
    """cos, sin ``[B, 1, T, d]`` for positions int ``[B, T]``: angle(p, i) = p * inv_freq[i mod d/2]
    (both times ``scale``, YaRN's attention factor)."""
    angles = positions[..., None].float() * inv_freq[None, None, :]   # [B, T, d/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]                # [B, 1, T, d]
    return (emb.cos() * scale).to(dtype), (emb.sin() * scale).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x_i, x_{i+d/2}) by the angle: x*cos + rotate_half(x)*sin (the Hugging Face layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """GQA attention over the static cache. ``in_features`` is ``E`` (``2E`` in an EAGLE-3 head)."""

    def __init__(self, cfg: ModelConfig, layer: int, in_features: int | None = None):
        super().__init__()
        inp = in_features or cfg.hidden_size
        self.layer, self.h, self.hkv, self.d = layer, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(inp, self.h * self.d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(inp, self.hkv * self.d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(inp, self.hkv * self.d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.h * self.d, cfg.hidden_size, bias=False)
        if cfg.qk_norm:   # Qwen3: RMSNorm over each head's d before RoPE
            self.q_norm, self.k_norm = RMSNorm(self.d, cfg.rms_norm_eps), RMSNorm(self.d, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.kv_scales: tuple[float, float] | None = None   # FP8 KV cache (k_scale, v_scale), see quant.py

    def forward(self, x, cos, sin, cache: KVCache, rows, write_idx, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d)
        k = self.k_proj(x).view(B, T, self.hkv, self.d)
        v = self.v_proj(x).view(B, T, self.hkv, self.d)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)                  # [B, H, T, d]
        k = apply_rope(k.transpose(1, 2), cos, sin)                  # [B, Hkv, T, d]
        if self.kv_scales is not None:   # an FP8 cache stores fp8(k / k_scale) and reads it times k_scale
            k = fp8_roundtrip(k, self.kv_scales[0]).to(q.dtype)
            v = fp8_roundtrip(v, self.kv_scales[1]).to(q.dtype)
        # write the new K/V: cache[layer, rows[b], :, write_idx[b, t]] = k[b, :, t]
        r = rows[:, None].expand(B, T)
        cache.k[self.layer, r, :, write_idx] = k.transpose(1, 2).to(cache.k.dtype)
        cache.v[self.layer, r, :, write_idx] = v.to(cache.v.dtype)
        S = mask.shape[-1]
        keys = cache.k[self.layer, rows, :, :S].to(q.dtype)          # [B, Hkv, S, d]
        values = cache.v[self.layer, rows, :, :S].to(q.dtype)
        # softmax(q k^T / sqrt(d) masked) v; query head h reads KV head h // (H / Hkv) (GQA);
        # every row of `mask` has at least one slot set
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None],
                                             enable_gqa=self.h != self.hkv)   # [B, H, T, d]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.h * self.d))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: h += attn(norm(h)); h += mlp(norm(h))."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.self_attn = Attention(cfg, layer)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h, cos, sin, cache, rows, write_idx, mask):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache, rows, write_idx, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    """The decoder. Parameter names match the Hugging Face checkpoint (``model.*``, ``lm_head``)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.model.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.model.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.register_buffer("inv_freq", cfg.rope.inv_freq(cfg.head_dim), persistent=False)
        self.quant: QuantInfo | None = None   # what load_model dequantized (None: an unquantized checkpoint)

    def new_cache(self, rows: int, slots: int) -> KVCache:
        c = self.config
        p = self.lm_head.weight
        return KVCache(c.num_hidden_layers, rows, c.num_key_value_heads, slots, c.head_dim, device=p.device, dtype=p.dtype)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(tokens)

    def forward(self, tokens, positions, cache: KVCache, rows, write_idx, mask, capture: tuple[int, ...] = ()):
        """Run T new tokens per request through the decoder, writing their K/V into the cache.

        Args:
            tokens: int64 ``[B, T]``; positions: int64 ``[B, T]`` (RoPE positions);
            cache: the KV cache; rows: int64 ``[B]``, the cache row of each request;
            write_idx: int64 ``[B, T]``, the slot each new token's K/V is written to;
            mask: bool ``[B, T, S']``, slots ``0..S'-1`` each new token attends to (after the write);
            capture: layer ids whose outputs are returned (EAGLE-3's auxiliary hidden states).

        Returns:
            hidden: ``[B, T, E]`` after the final norm (``logits = lm_head(hidden)``);
            aux: ``[B, T, len(capture) * E]`` (concatenated in ``capture`` order) or None.
        """
        h = self.embed(tokens)
        cos, sin = rope_cos_sin(positions, self.inv_freq, h.dtype, self.config.rope.attention_scale())
        captured = {}
        for i, layer in enumerate(self.model.layers):
            h = layer(h, cos, sin, cache, rows, write_idx, mask)
            if i in capture:
                captured[i] = h
        aux = torch.cat([captured[i] for i in capture], dim=-1) if capture else None
        return self.model.norm(h), aux

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 ``[..., V]`` from final hidden states ``[..., E]``."""
        return self.lm_head(hidden).float()


class Eagle3Head(nn.Module):
    """EAGLE-3 draft head (Model-Optimizer export layout: ``fc``, ``layers.0.*``, ``norm``, ``lm_head``, ``d2t``).

    One step of the head, for the token ``x_{t+1}`` and an input state ``g_t`` (the fused target
    features ``fc(cat(aux_t))`` on the first draft step, the head's own previous pre-norm output
    after that)::

        a = cat(input_layernorm(embed(x_{t+1})), hidden_norm(g_t))        # [2E]
        h = g_t + attn(a);  h = h + mlp(post_attention_layernorm(h))      # h is g_{t+1}
        logits_draft = lm_head(norm(h))                                   # [V_draft]
        target id of draft id j = j + d2t[j]

    This is the layer of the serving engines (vLLM's and TensorRT-LLM's Eagle-3 Llama layer), which
    deploy Model-Optimizer's exports.
    """

    def __init__(self, cfg: Eagle3Config, target_hidden: int):
        super().__init__()
        c = cfg.layer
        self.config = cfg
        self.fc = nn.Linear(len(cfg.aux_layer_ids) * target_hidden, c.hidden_size, bias=False)
        layer = nn.Module()
        layer.self_attn = Attention(c, 0, in_features=2 * c.hidden_size)
        layer.mlp = MLP(c)
        layer.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        layer.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        layer.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList([layer])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("inv_freq", c.rope.inv_freq(c.head_dim), persistent=False)

    def new_cache(self, rows: int, slots: int) -> KVCache:
        c = self.config.layer
        p = self.lm_head.weight
        return KVCache(1, rows, c.num_key_value_heads, slots, c.head_dim, device=p.device, dtype=p.dtype)

    def forward(self, embeds, g, positions, cache, rows, write_idx, mask, draft_vocab: bool = False):
        """embeds, g: ``[B, T, E]``; the rest as :meth:`Transformer.forward`.
        Returns (g_next ``[B, T, E]`` pre-norm, logits float32 ``[B, T, V]`` over the target vocabulary,
        ``-inf`` on ids the draft vocabulary cannot produce; ``[B, T, V_draft]`` with ``draft_vocab=True``)."""
        layer = self.layers[0]
        cos, sin = rope_cos_sin(positions, self.inv_freq, g.dtype, self.config.layer.rope.attention_scale())
        a = torch.cat((layer.input_layernorm(embeds), layer.hidden_norm(g)), dim=-1)
        h = g + layer.self_attn(a, cos, sin, cache, rows, write_idx, mask)
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        logits = self.lm_head(self.norm(h)).float()
        return h, logits if draft_vocab else self.target_logits(logits)

    def target_ids(self) -> torch.Tensor:
        """int64 ``[V_draft]``: the target id of every draft id, ``j + d2t[j]``."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Scatter ``[..., V_draft]`` logits to the target vocabulary ``[..., V]`` through d2t."""
        V = self.config.layer.vocab_size
        if self.config.draft_vocab_size == V:
            return draft_logits
        out = draft_logits.new_full((*draft_logits.shape[:-1], V), float("-inf"))
        out[..., self.target_ids()] = draft_logits
        return out


def _load_into(module: nn.Module, tensors: dict[str, torch.Tensor], where: Path, optional=()) -> None:
    """Copy checkpoint tensors into ``module``'s parameters, checking names and shapes."""
    expected = dict(module.state_dict())
    missing = [k for k in expected if k not in tensors and k not in optional]
    if missing:
        raise ModelFormatError(f"{where}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    for name, param in expected.items():
        if name not in tensors:
            continue
        t = tensors[name]
        if tuple(t.shape) != tuple(param.shape):
            raise ModelFormatError(f"{where}: tensor {name} has shape {tuple(t.shape)}, expected {tuple(param.shape)}")
        param.copy_(t.to(param.dtype))


@torch.no_grad()
def load_model(model_dir: str | Path, *, device="cpu", dtype=torch.float32, quant_activations: bool = True) -> Transformer:
    """Load a supported decoder from a Hugging Face directory (safetensors only).

    A Model-Optimizer quantized checkpoint is dequantized here, once (see :mod:`trtspec.runtime.quant`);
    ``quant_activations`` (default True) also applies its activation and FP8 KV-cache quantizers in
    the forward, False loads the weights alone. ``model.quant`` says what was done.
    """
    model_dir = Path(model_dir)
    cfg = read_model_config(model_dir)
    if not isinstance(cfg, ModelConfig):   # the DeepSeek-V3 layout: MLA + MoE (trtspec.runtime.deepseek)
        from trtspec.runtime.deepseek import load_deepseek

        return load_deepseek(model_dir, device=device, dtype=dtype, quant_activations=quant_activations)
    qcfg = read_quant_config(model_dir)
    tensors = load_safetensors(model_dir)
    plan = info = None
    if qcfg is not None:
        tensors, plan, info = dequantize_checkpoint(tensors, qcfg, str(model_dir), activations=quant_activations)
    if "lm_head.weight" not in tensors:
        if not cfg.tie_word_embeddings:
            raise ModelFormatError(f"{model_dir}: lm_head.weight missing and tie_word_embeddings is false")
        tensors["lm_head.weight"] = tensors.get("model.embed_tokens.weight")
    model = Transformer(cfg)
    _load_into(model, tensors, model_dir)
    if info is not None:
        install(model, plan)
        model.quant = dataclasses.replace(info, dtype=str(dtype).removeprefix("torch."))
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def load_eagle3(model_dir: str | Path, target: Transformer, *, device="cpu", dtype=torch.float32) -> Eagle3Head:
    """Load an EAGLE-3 head exported by Model-Optimizer; ``lm_head`` falls back to the target's."""
    model_dir = Path(model_dir)
    cfg = read_eagle3_config(model_dir)
    if read_quant_config(model_dir) is not None:
        raise ModelFormatError(f"{model_dir}: a quantized EAGLE-3 head is not supported (the runtime dequantizes "
                               "quantized targets and draft models; export the head unquantized)")
    t = target.config
    if cfg.layer.vocab_size != t.vocab_size:
        raise ModelFormatError(f"{model_dir}: eagle3 vocab_size={cfg.layer.vocab_size} differs from the "
                               f"target's {t.vocab_size}")
    bad = [i for i in cfg.aux_layer_ids if not 0 <= i < t.num_hidden_layers]
    if bad:
        raise ModelFormatError(f"{model_dir}: eagle_aux_hidden_state_layer_ids {bad} outside the target's "
                               f"0..{t.num_hidden_layers - 1}")
    tensors = {k.replace("midlayer.", "layers.0."): v for k, v in load_safetensors(model_dir).items()}
    if "lm_head.weight" not in tensors and cfg.draft_vocab_size == t.vocab_size:
        tensors["lm_head.weight"] = target.lm_head.weight.detach().cpu()
    if cfg.draft_vocab_size < t.vocab_size and "d2t" not in tensors:
        raise ModelFormatError(f"{model_dir}: draft_vocab_size {cfg.draft_vocab_size} < vocab_size {t.vocab_size} "
                               "but the checkpoint has no d2t map")
    head = Eagle3Head(cfg, t.hidden_size)
    _load_into(head, tensors, model_dir, optional=("d2t",))
    ids = head.target_ids()
    if bool((ids < 0).any() or (ids >= t.vocab_size).any()):
        raise ModelFormatError(f"{model_dir}: d2t maps draft ids outside the target vocabulary 0..{t.vocab_size - 1}")
    return head.to(device=device, dtype=dtype).eval()
