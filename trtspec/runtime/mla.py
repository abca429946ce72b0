"""Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1) over a latent KV cache, absorbed.

Per token MLA compresses keys and values of all heads into one latent ``c = kv_a_layernorm(kv_a[:r])``
(``r = kv_lora_rank``) plus one RoPE key ``k_pe = rope(kv_a[r:])`` (``d_r = qk_rope_head_dim``) shared by
the heads; the cache keeps exactly these ``r + d_r`` values per token (GQA keeps ``2 Hkv d``). Head h's key
and value are ``k_h = [W_UK[h] c ; k_pe]``, ``v_h = W_UV[h] c`` with ``W_UK``, ``W_UV`` the two row blocks
of ``kv_b_proj`` (``[H, d_nope + d_v, r]``).

The attention here is the **absorbed** form the engines decode with (FlashMLA, TensorRT-LLM's MLA
generation kernels): ``W_UK`` moves onto the query and ``W_UV`` after the softmax, so no per-head K/V is
ever built and every head attends over the one latent cache (multi-query attention, head dim ``r + d_r``)::

    q_lat[h] = W_UK[h]^T q_nope[h]                                   # [r]
    score[h, s] = (q_lat[h] . c_s + q_pe[h] . k_pe_s) * softmax_scale
    out[h] = W_UV[h] (softmax_s(score[h]) @ c)                       # [d_v]

It equals the expanded form (``q_h . k_h``, ``softmax @ v_h``) up to float rounding; the tests check it
against Hugging Face's ``DeepseekV3Attention`` (expanded) and a plain reference. One forward serves
prefill, decoding and tree verification, as :class:`trtspec.runtime.models.Attention` does: the caller
gives each new token's cache slot (``write_idx``) and the slots it may attend to (``mask``).

RoPE rotates DeepSeek's interleaved pairs ``(x_{2i}, x_{2i+1})`` by ``theta_i`` and writes the result
de-interleaved (``[x_even', x_odd']``) for queries and keys alike, as Hugging Face does; the dot products
are those of the interleaved rotation.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.deepseek_config import DeepseekConfig
from trtspec.runtime.models import RMSNorm


class LatentCache:
    """MLA cache: ``latent`` ``[layers, rows, S, r]`` and ``k_pe`` ``[layers, rows, S, d_r]``; a request owns a
    row, the engine keeps its length, slots past it are scratch (as :class:`trtspec.runtime.models.KVCache`)."""

    def __init__(self, layers: int, rows: int, slots: int, kv_lora_rank: int, rope_dim: int, *, device, dtype):
        self.latent = torch.zeros(layers, rows, slots, kv_lora_rank, device=device, dtype=dtype)
        self.k_pe = torch.zeros(layers, rows, slots, rope_dim, device=device, dtype=dtype)

    @property
    def slots(self) -> int:
        return self.latent.shape[2]

    def move(self, rows: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy slot ``src[b, i]`` to ``dst[b, i]`` of row ``rows[b]`` in every layer; -1 entries are skipped.
        Sources are gathered before any write, so overlapping moves are safe."""
        keep = src >= 0
        if not bool(keep.any()):
            return
        r = rows[:, None].expand_as(src)[keep]
        s, t = src[keep].long(), dst[keep].long()
        for cache in (self.latent, self.k_pe):
            cache[:, r, t] = cache[:, r, s].clone()                       # [layers, M, dim]


def rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs ``(x_{2i}, x_{2i+1})`` of ``x`` ``[B, *, T, d]`` by angle i; returns ``[x_even', x_odd']``.

    ``cos``/``sin`` ``[B, 1, T, d]`` as :func:`trtspec.runtime.models.rope_cos_sin` builds them (angles twice)."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.cat((even * c - odd * s, odd * c + even * s), dim=-1)


def linear_input(linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What ``linear`` multiplies by its weight: ``x``, or for a quantized layer (:class:`QuantLinear`)
    ``act(x * pre_quant_scale)``. Both are elementwise per token, so they may be applied before caching."""
    pqs = getattr(linear, "pre_quant_scale", None)
    if pqs is not None:
        x = x * pqs
    act = getattr(linear, "act", None)
    return x if act is None else act(x)


class MLAttention(nn.Module):
    """Multi-head latent attention; parameter names are the checkpoint's (``q_a_proj``, ``q_a_layernorm``,
    ``q_b_proj`` or ``q_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``)."""

    def __init__(self, cfg: DeepseekConfig, layer: int):
        super().__init__()
        E, H = cfg.hidden_size, cfg.num_attention_heads
        self.layer, self.h = layer, H
        self.d_nope, self.d_rope, self.d_v, self.r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        self.scale = cfg.softmax_scale
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(E, H * cfg.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(E, cfg.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, H * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(E, self.r + self.d_rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.r, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.r, H * (self.d_nope + self.d_v), bias=False)
        self.o_proj = nn.Linear(H * self.d_v, E, bias=False)

    def query(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, T, d_nope + d_rope]`` before RoPE."""
        B, T, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q.view(B, T, self.h, self.d_nope + self.d_rope).transpose(1, 2)

    def latent(self, x: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """The cache entries of ``x`` ``[B, T, E]``: latent ``[B, T, r]`` (as ``kv_b_proj`` reads it) and
        rotated ``k_pe`` ``[B, T, d_r]``."""
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.r, self.d_rope], dim=-1)
        c = linear_input(self.kv_b_proj, self.kv_a_layernorm(c))
        return c, rope_interleaved(k_pe[:, None], cos, sin)[:, 0]

    def up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``W_UK`` ``[H, d_nope, r]`` and ``W_UV`` ``[H, d_v, r]`` from ``kv_b_proj`` (dequantized if quantized)."""
        w = self.kv_b_proj.weight.view(self.h, self.d_nope + self.d_v, self.r)
        return w[:, : self.d_nope], w[:, self.d_nope:]

    def forward(self, x, cos, sin, cache: LatentCache, rows, write_idx, mask):
        """x ``[B, T, E]``; cos/sin ``[B, 1, T, d_r]``; rows ``[B]``; write_idx ``[B, T]``; mask bool ``[B, T, S']``
        (every row has a slot set). Writes the T latents, attends over slots ``0..S'-1``; returns ``[B, T, E]``."""
        B, T, _ = x.shape
        q_nope, q_pe = self.query(x).split([self.d_nope, self.d_rope], dim=-1)      # [B, H, T, *]
        q_pe = rope_interleaved(q_pe, cos, sin)
        c, k_pe = self.latent(x, cos, sin)
        r = rows[:, None].expand(B, T)
        cache.latent[self.layer, r, write_idx] = c.to(cache.latent.dtype)
        cache.k_pe[self.layer, r, write_idx] = k_pe.to(cache.k_pe.dtype)
        S = mask.shape[-1]
        lat = cache.latent[self.layer, rows, :S].to(x.dtype)                         # [B, S, r]
        kpe = cache.k_pe[self.layer, rows, :S].to(x.dtype)                           # [B, S, d_r]
        w_uk, w_uv = self.up_weights()
        q_lat = torch.einsum("bhtd,hdr->bhtr", q_nope, w_uk.to(x.dtype))            # absorb W_UK
        query = torch.cat((q_lat, q_pe), dim=-1)                                     # [B, H, T, r + d_r]
        key = torch.cat((lat, kpe), dim=-1)[:, None]                                 # [B, 1, S, r + d_r]
        o_lat = F.scaled_dot_product_attention(query, key, lat[:, None], attn_mask=mask[:, None], scale=self.scale,
                                               enable_gqa=self.h > 1)               # [B, H, T, r]
        out = torch.einsum("bhtr,hvr->bthv", o_lat, w_uv.to(x.dtype))               # absorb W_UV
        return self.o_proj(out.reshape(B, T, self.h * self.d_v))
