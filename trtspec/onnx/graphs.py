"""Step graphs of a Llama-family target and draft, written for ONNX export.

The runtime's decoder (:mod:`trtspec.runtime.models`) keeps a static KV cache it updates in
place; an exported graph must be functional instead: past K/V in, the new tokens' K/V out, and the
host (or TensorRT's runtime) owns the cache. Two graphs:

* :class:`TargetVerifyStep` -- the target over a draft tree of ``N`` nodes::

      packed_mask, depth = TrtSpecTreeMask(parents)                  # plugin node
      positions          = cache_lens + depth                         # per-node RoPE positions
      attend(i, slot)    = slot < cache_lens  (committed past)  or  bit(packed_mask[i], slot - P)
      logits             = lm_head(decoder(tokens))                   # [B, N, V]
      accepted_len, accepted_nodes, bonus = TrtSpecVerifyGreedy(tokens, parents, logits)

* :class:`DraftStep` -- the draft over ``T`` new tokens of a chain (prefill or one decode step),
  returning the last position's logits and the new K/V.

Shapes: B requests (dynamic), N tree nodes (fixed at export), T new tokens (dynamic), P past
slots (dynamic; slots ``>= cache_lens[b]`` are padding), L layers, Hkv KV heads, d head dim,
V vocabulary.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.runtime.models import Transformer, apply_rope, rms_norm, rope_cos_sin

NAMESPACE = "trtspec"
PLUGIN_VERSION = "1"


# ---------------------------------------------------------------------------------------------
# Export-side ops, one per plugin: the same signature as the plugin node, computed by trtspec.ops
# (so the eager/traced graph is exact) and exported as the custom-domain node.
# ---------------------------------------------------------------------------------------------
@torch.library.custom_op("trtspec_export::tree_mask", mutates_args=())
def tree_mask(parents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """parents int32 ``[B, N]`` -> packed_mask int32 ``[B, N, ceil(N/32)]``, depth int32 ``[B, N]``."""
    from trtspec import ops

    mask, depth, _, _ = ops.tree_metadata(parents.contiguous())
    return mask, depth


@tree_mask.register_fake
def _(parents):
    B, N = parents.shape
    return parents.new_empty((B, N, (N + 31) // 32)), parents.new_empty((B, N))


@torch.library.custom_op("trtspec_export::verify_greedy", mutates_args=())
def verify_greedy(tokens: torch.Tensor, parents: torch.Tensor, target_logits: torch.Tensor,
                  max_depth: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """As :func:`trtspec.ops.verify_greedy` without ``num_nodes`` (the plugin's required inputs)."""
    from trtspec import ops

    return ops.verify_greedy(tokens.contiguous(), parents.contiguous(), target_logits.contiguous(),
                             max_depth=max_depth)


@verify_greedy.register_fake
def _(tokens, parents, target_logits, max_depth):
    B = tokens.shape[0]
    return (tokens.new_empty((B,), dtype=torch.int32), tokens.new_empty((B, max_depth + 1), dtype=torch.int32),
            tokens.new_empty((B,), dtype=torch.int64))


def _symbolic_tree_mask(g, parents):
    return g.op(f"{NAMESPACE}::TrtSpecTreeMask", parents, plugin_version_s=PLUGIN_VERSION,
                plugin_namespace_s=NAMESPACE, outputs=2)


def _symbolic_verify_greedy(g, tokens, parents, logits, max_depth):
    from torch.onnx import symbolic_helper

    depth = symbolic_helper._maybe_get_const(max_depth, "i")
    return g.op(f"{NAMESPACE}::TrtSpecVerifyGreedy", tokens, parents, logits, max_depth_i=int(depth),
                plugin_version_s=PLUGIN_VERSION, plugin_namespace_s=NAMESPACE, outputs=3)


def register_symbolics(opset: int) -> None:
    """Map the export-side ops to the ``trtspec`` plugin nodes for the TorchScript exporter."""
    torch.onnx.register_custom_op_symbolic("trtspec_export::tree_mask", _symbolic_tree_mask, opset)
    torch.onnx.register_custom_op_symbolic("trtspec_export::verify_greedy", _symbolic_verify_greedy, opset)


# ---------------------------------------------------------------------------------------------
# Functional decoder
# ---------------------------------------------------------------------------------------------
def unpack_mask(packed: torch.Tensor, nodes: int) -> torch.Tensor:
    """bool ``[B, N, N]`` from the packed mask int32 ``[B, N, W]``: ``out[b, i, j] = bit j of row i``."""
    j = torch.arange(nodes)
    words = packed.index_select(2, j // 32)                          # [B, N, N]: the word holding bit j
    bits = torch.tensor([(1 << (k % 32)) - (1 << 32 if k % 32 == 31 else 0) for k in range(nodes)],
                        dtype=torch.int32)                            # 1 << (j % 32) as int32
    return torch.bitwise_and(words, bits) != 0


def decode(model: Transformer, tokens, positions, past_k, past_v, attend):
    """The decoder over T new tokens per request, functionally.

    tokens, positions int64 ``[B, T]``; past_k, past_v float ``[L, B, Hkv, P, d]``; attend bool
    ``[B, T, P + T]`` (which past slots and which new tokens each new token sees).
    Returns hidden ``[B, T, E]`` (after the final norm) and new_k, new_v ``[L, B, Hkv, T, d]``.
    """
    cfg = model.config
    B, T = tokens.shape
    H, Hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    cos, sin = rope_cos_sin(positions, model.inv_freq, torch.float32, cfg.rope.attention_scale())
    bias = torch.zeros(attend.shape, dtype=torch.float32).masked_fill(~attend, float("-inf"))[:, None]
    h = model.model.embed_tokens(tokens)
    new_k, new_v = [], []
    for li, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        x = rms_norm(h, layer.input_layernorm.weight, layer.input_layernorm.eps)
        q = attn.q_proj(x).view(B, T, H, d)
        k = attn.k_proj(x).view(B, T, Hkv, d)
        v = attn.v_proj(x).view(B, T, Hkv, d).transpose(1, 2)
        if attn.q_norm is not None:
            q, k = attn.q_norm(q), attn.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)                    # [B, H, T, d]
        k = apply_rope(k.transpose(1, 2), cos, sin)                    # [B, Hkv, T, d]
        new_k.append(k)
        new_v.append(v)
        keys = torch.cat((past_k[li], k), dim=2).repeat_interleave(H // Hkv, 1)     # [B, H, P+T, d]
        values = torch.cat((past_v[li], v), dim=2).repeat_interleave(H // Hkv, 1)
        scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(d) + bias       # [B, H, T, P+T]
        out = torch.matmul(torch.softmax(scores, dim=-1), values)                     # [B, H, T, d]
        h = h + attn.o_proj(out.transpose(1, 2).reshape(B, T, H * d))
        x = rms_norm(h, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.eps)
        h = h + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(x)) * layer.mlp.up_proj(x))
    h = rms_norm(h, model.model.norm.weight, model.model.norm.eps)
    return h, torch.stack(new_k), torch.stack(new_v)


class TargetVerifyStep(nn.Module):
    """Target verification over a draft tree (see the module docstring).

    Inputs: tokens int64 ``[B, N]``, parents int32 ``[B, N]``, cache_lens int64 ``[B]``,
    past_k/past_v float32 ``[L, B, Hkv, P, d]``.
    Outputs: accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, max_depth+1]``, bonus_token int64
    ``[B]``, new_k/new_v float32 ``[L, B, Hkv, N, d]`` (node i's K/V at index i).
    """

    def __init__(self, model: Transformer, max_depth: int):
        super().__init__()
        self.model, self.max_depth = model, max_depth

    def forward(self, tokens, parents, cache_lens, past_k, past_v):
        N = tokens.shape[1]
        packed, depth = tree_mask(parents)
        positions = cache_lens[:, None] + depth.long()                # [B, N]
        past = torch.arange(past_k.shape[3])[None, None, :] < cache_lens[:, None, None]   # [B, 1, P]
        past = past.expand(-1, N, -1)
        attend = torch.cat((past, unpack_mask(packed, N)), dim=-1)    # [B, N, P+N]
        hidden, new_k, new_v = decode(self.model, tokens, positions, past_k, past_v, attend)
        logits = self.model.lm_head(hidden).float()
        accepted_len, accepted_nodes, bonus = verify_greedy(tokens, parents, logits, self.max_depth)
        return accepted_len, accepted_nodes, bonus, new_k, new_v


class DraftStep(nn.Module):
    """Draft model over T new chain tokens.

    Inputs: tokens int64 ``[B, T]``, cache_lens int64 ``[B]``, past_k/past_v ``[L, B, Hkv, P, d]``.
    Outputs: logits float32 ``[B, V]`` at the last new token, new_k/new_v ``[L, B, Hkv, T, d]``.
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, tokens, cache_lens, past_k, past_v):
        T = tokens.shape[1]
        steps = torch.arange(T)
        positions = cache_lens[:, None] + steps[None, :]
        past = (torch.arange(past_k.shape[3])[None, None, :] < cache_lens[:, None, None]).expand(-1, T, -1)
        causal = (steps[None, :] <= steps[:, None])[None].expand(tokens.shape[0], -1, -1)
        hidden, new_k, new_v = decode(self.model, tokens, positions, past_k, past_v, torch.cat((past, causal), -1))
        return self.model.lm_head(hidden[:, -1]).float(), new_k, new_v
