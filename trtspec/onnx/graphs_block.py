"""The DFlash / DSpark drafter's step graph, beside the EAGLE-3 head's (:mod:`trtspec.onnx.graphs`).

One call per target step (:class:`BlockDraftStep`): append the context entries committed since the last call,
then draft one whole block over the context -- the maths of :class:`trtspec.runtime.block_head.BlockHead`,
functionally (the host owns the context K/V, as for the other step graphs)::

    c_t      = hidden_norm(fc(aux_hidden_t))                  new entries t < new_lens, at cache_lens + t
    new K/V  = per layer rope(k_norm(k_proj(c_t))), v_proj(c_t)
    block    = [root, mask x (block_size - 1)] at n .. n + block_size - 1, n = cache_lens + new_lens
    h        = the draft layers over the block, attending to the valid past, the valid new entries and
               the whole block (or its causal part)
    drafts   = DFlash: argmax lm_head(norm(h))[1:];  DSpark: d_{k+1} = argmax(U_k + markov(d_k, h_k)), d_0 = root

The target layer outputs come from the target graph's ``aux_hidden`` (``target_layer_ids`` captured before the
final norm); the last target layer, when fused, goes through the target's final norm here, as the head was
trained (:func:`trtspec.runtime.block_head.capture_features`).

Inputs: roots int64 ``[B]``, aux_hidden float32 ``[B, T, k*E]``, new_lens int64 ``[B]`` (1..T valid entries),
cache_lens int64 ``[B]``, past_k/past_v ``[L, B, Hkv, P, d]``. Outputs: drafts int64 ``[B, D]`` (D = the
block's drafts), new_k/new_v ``[L, B, Hkv, T, d]`` (the host keeps the first new_lens of them).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.block_head import BlockHead
from trtspec.runtime.models import Transformer, apply_rope, rms_norm, rope_cos_sin


def _heads(att, x, cos, sin):
    """q ``[B, H, T, d]``, k, v ``[B, Hkv, T, d]`` of inputs ``x [B, T, E]``."""
    B, T, _ = x.shape
    q = apply_rope(att.q_norm(att.q_proj(x).view(B, T, att.h, att.d)).transpose(1, 2), cos, sin)
    k = apply_rope(att.k_norm(att.k_proj(x).view(B, T, att.hkv, att.d)).transpose(1, 2), cos, sin)
    v = att.v_proj(x).view(B, T, att.hkv, att.d).transpose(1, 2)
    return q, k, v


class BlockDraftStep(nn.Module):
    """One block draft over a cached context (module docstring)."""

    def __init__(self, head: BlockHead, target: Transformer):
        super().__init__()
        self.head, self.target = head, target
        c = head.config
        last = target.config.num_hidden_layers - 1
        self.norm_slot = c.target_layer_ids.index(last) if last in c.target_layer_ids else -1

    def _features(self, aux):
        E = self.target.config.hidden_size
        if self.norm_slot >= 0:
            i = self.norm_slot
            t_norm = self.target.model.norm
            parts = [aux[..., :i * E], rms_norm(aux[..., i * E:(i + 1) * E], t_norm.weight, t_norm.eps),
                     aux[..., (i + 1) * E:]]
            aux = torch.cat(parts, dim=-1)
        return self.head.features(aux)

    def forward(self, roots, aux_hidden, new_lens, cache_lens, past_k, past_v):
        head, cfg = self.head, self.head.config
        B, T, _ = aux_hidden.shape
        P, S = past_k.shape[3], cfg.block_size
        scale = cfg.layer.rope.attention_scale()
        step = torch.arange(T)[None, :]
        pos_new = cache_lens[:, None] + step                                              # [B, T]
        feats = self._features(aux_hidden)
        cos_n, sin_n = rope_cos_sin(pos_new, head.inv_freq, torch.float32, scale)
        n = cache_lens + new_lens                                                         # root position
        pos_blk = n[:, None] + torch.arange(S)[None, :]
        cos_b, sin_b = rope_cos_sin(pos_blk, head.inv_freq, torch.float32, scale)
        tokens = torch.cat([roots[:, None], torch.full((B, S - 1), cfg.mask_token_id, dtype=torch.int64)], 1)
        h = self.target.model.embed_tokens(tokens)
        seen = torch.cat([(torch.arange(P)[None, :] < cache_lens[:, None]),                # valid past
                          step < new_lens[:, None]], 1)[:, None, None, :].expand(B, 1, S, P + T)
        inner = torch.ones(S, S, dtype=torch.bool)
        inner = inner.tril() if cfg.causal else inner
        bias = torch.zeros(B, 1, S, P + T + S).masked_fill(
            ~torch.cat([seen, inner[None, None].expand(B, 1, S, S)], -1), float("-inf"))
        new_k, new_v = [], []
        for i, layer in enumerate(head.layers):
            att = layer.self_attn
            _, kc, vc = _heads(att, feats, cos_n, sin_n)
            new_k.append(kc)
            new_v.append(vc)
            x = layer.input_layernorm(h)
            q, kb, vb = _heads(att, x, cos_b, sin_b)
            rep = att.h // att.hkv
            keys = torch.cat([past_k[i], kc, kb], 2).repeat_interleave(rep, 1)
            values = torch.cat([past_v[i], vc, vb], 2).repeat_interleave(rep, 1)
            scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(att.d) + bias
            out = torch.matmul(torch.softmax(scores, -1), values)
            h = h + att.o_proj(out.transpose(1, 2).reshape(B, S, att.h * att.d))
            h = h + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(layer.post_attention_layernorm(h)))
                                        * layer.mlp.up_proj(layer.post_attention_layernorm(h)))
        h = head.norm(h)
        logits = self.target.lm_head(h).float()                                           # [B, S, V]
        return self._drafts(roots, h, logits), torch.stack(new_k), torch.stack(new_v)

    def _drafts(self, roots, h, logits):
        cfg = self.head.config
        if cfg.drafter == "dflash":
            return logits[:, 1:].argmax(-1)
        prev, state, out = roots, None, []
        for k in range(cfg.block_size):
            bias, state = self.head.markov_step(prev, h[:, k], state)
            prev = (logits[:, k] + bias.float()).argmax(-1)
            out.append(prev)
        return torch.stack(out, 1)
