"""Step graphs of a Llama-family target, its draft model and an EAGLE-3 head, written for ONNX export.

The runtime's decoder (:mod:`trtspec.runtime.models`) keeps a static KV cache it updates in
place; an exported graph must be functional instead: past K/V in, the new tokens' K/V out, and the
host (or TensorRT's runtime) owns the cache. The graphs:

* :class:`TargetVerifyStep` -- the target over a draft tree of ``N`` nodes::

      packed_mask, depth = TrtSpecTreeMask(parents)                  # plugin node
      positions          = cache_lens + depth                         # per-node RoPE positions
      attend(i, slot)    = slot < cache_lens  (committed past)  or  bit(packed_mask[i], slot - P)
      logits             = lm_head(decoder(tokens))                   # [B, N, V]
      accepted_len, accepted_nodes, bonus = TrtSpecVerifyGreedy(tokens, parents, logits)

  With ``capture`` layer ids it also returns those layers' outputs (EAGLE-3's auxiliary hidden
  states), concatenated in ``capture`` order. :class:`SampledVerifyStep` computes the target's
  probabilities in the graph (temperature / top-k / top-p per request, runtime inputs) and ends in
  ``TrtSpecVerifySample`` (trees) or ``TrtSpecVerifyBlock`` (chains), with the draft's probabilities
  and each request's seed / offset as inputs.

* :class:`DraftStep` -- the draft model over ``T`` new tokens of a chain (prefill or one decode
  step), returning the last position's logits and the new K/V (:class:`SampledDraftStep`: also the
  transformed distribution the next draft is drawn from).

* :class:`Eagle3DraftStep` -- the EAGLE-3 head over ``T`` new entries ``(g, token)`` of a chain, where
  ``g`` is ``fc(aux_hidden)`` (entries of committed tokens) or the head's previous output (drafts).

Shapes: B requests, N tree nodes, T new tokens, P past slots (slots ``>= cache_lens[b]`` are
padding), L layers, Hkv KV heads, d head dim, V vocabulary, E hidden size; all of B, N, T, P are
dynamic axes of the exported graphs.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trtspec.onnx.export_ops import tree_mask, verify_block, verify_greedy, verify_sample
from trtspec.onnx.sampling_graph import sampling_probs, sort_width
from trtspec.runtime.models import Eagle3Head, Transformer, apply_rope, rms_norm, rope_cos_sin


def unpack_mask(packed: torch.Tensor, nodes: int) -> torch.Tensor:
    """bool ``[B, N, N]`` from the packed mask int32 ``[B, N, W]``: ``out[b, i, j] = bit j of row i``.

    Integer arithmetic only (a word read as unsigned 32 bits, then ``(word >> k) & 1`` as
    ``floor(word / 2^k) mod 2``): TensorRT runs it without bitwise layers.
    """
    j = torch.arange(nodes)
    words = packed.index_select(2, j // 32).long()                   # [B, N, N]: the word holding bit j
    words = torch.where(words < 0, words + (1 << 32), words)        # as unsigned
    powers = (2 ** torch.arange(32, dtype=torch.int64)).index_select(0, j % 32)   # 2^(j mod 32)
    return torch.remainder(torch.div(words, powers, rounding_mode="floor"), 2) != 0


def _attention(attn, x, cos, sin, past_k, past_v, bias):
    """One GQA attention over past + new K/V; returns (output ``[B, T, E]``, k, v ``[B, Hkv, T, d]``)."""
    B, T, _ = x.shape
    H, Hkv, d = attn.h, attn.hkv, attn.d
    q = attn.q_proj(x).view(B, T, H, d)
    k = attn.k_proj(x).view(B, T, Hkv, d)
    v = attn.v_proj(x).view(B, T, Hkv, d).transpose(1, 2)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = apply_rope(q.transpose(1, 2), cos, sin)                    # [B, H, T, d]
    k = apply_rope(k.transpose(1, 2), cos, sin)                    # [B, Hkv, T, d]
    keys = torch.cat((past_k, k), dim=2).repeat_interleave(H // Hkv, 1)     # [B, H, P+T, d]
    values = torch.cat((past_v, v), dim=2).repeat_interleave(H // Hkv, 1)
    scores = torch.matmul(q, keys.transpose(-1, -2)) / math.sqrt(d) + bias   # [B, H, T, P+T]
    out = torch.matmul(torch.softmax(scores, dim=-1), values)                 # [B, H, T, d]
    return attn.o_proj(out.transpose(1, 2).reshape(B, T, H * d)), k, v


def _bias(attend: torch.Tensor) -> torch.Tensor:
    """Additive attention bias ``[B, 1, T, S]`` (0 where ``attend``, -inf elsewhere)."""
    return torch.zeros(attend.shape, dtype=torch.float32).masked_fill(~attend, float("-inf"))[:, None]


def decode(model: Transformer, tokens, positions, past_k, past_v, attend, capture: tuple[int, ...] = ()):
    """The decoder over T new tokens per request, functionally.

    tokens, positions int64 ``[B, T]``; past_k, past_v float ``[L, B, Hkv, P, d]``; attend bool
    ``[B, T, P + T]`` (which past slots and which new tokens each new token sees).
    Returns hidden ``[B, T, E]`` (after the final norm), new_k, new_v ``[L, B, Hkv, T, d]`` and the
    outputs of the ``capture`` layers concatenated ``[B, T, len(capture) * E]`` (None without).
    """
    cfg = model.config
    cos, sin = rope_cos_sin(positions, model.inv_freq, torch.float32, cfg.rope.attention_scale())
    bias = _bias(attend)
    h = model.model.embed_tokens(tokens)
    new_k, new_v, captured = [], [], {}
    for li, layer in enumerate(model.model.layers):
        x = rms_norm(h, layer.input_layernorm.weight, layer.input_layernorm.eps)
        out, k, v = _attention(layer.self_attn, x, cos, sin, past_k[li], past_v[li], bias)
        new_k.append(k)
        new_v.append(v)
        h = h + out
        x = rms_norm(h, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.eps)
        h = h + layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(x)) * layer.mlp.up_proj(x))
        if li in capture:
            captured[li] = h
    aux = torch.cat([captured[i] for i in capture], dim=-1) if capture else None
    return rms_norm(h, model.model.norm.weight, model.model.norm.eps), torch.stack(new_k), torch.stack(new_v), aux


def chain_attend(cache_lens: torch.Tensor, T: int, past_slots: int) -> torch.Tensor:
    """bool ``[B, T, P + T]``: new token t sees the committed past and new tokens ``0..t``."""
    steps = torch.arange(T)
    past = (torch.arange(past_slots)[None, None, :] < cache_lens[:, None, None]).expand(-1, T, -1)
    causal = (steps[None, :] <= steps[:, None])[None].expand(cache_lens.shape[0], -1, -1)
    return torch.cat((past, causal), -1)


class TargetVerifyStep(nn.Module):
    """Target verification over a draft tree (see the module docstring), ending in TrtSpecVerifyGreedy.

    Inputs: tokens int64 ``[B, N]``, parents int32 ``[B, N]``, cache_lens int64 ``[B]``,
    past_k/past_v float32 ``[L, B, Hkv, P, d]``.
    Outputs: accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, N]`` (root first, -1 padded),
    bonus_token int64 ``[B]``, new_k/new_v float32 ``[L, B, Hkv, N, d]`` (node i's K/V at index i), and
    with ``capture`` aux_hidden float32 ``[B, N, len(capture) * E]``.
    """

    def __init__(self, model: Transformer, capture: tuple[int, ...] = ()):
        super().__init__()
        self.model, self.capture = model, tuple(capture)

    def score(self, tokens, parents, cache_lens, past_k, past_v):
        """-> target logits float32 ``[B, N, V]``, new_k, new_v, aux (or None)."""
        N = tokens.shape[1]
        node = torch.arange(N)
        packed, depth = tree_mask(parents)
        positions = cache_lens[:, None] + depth.long()                # [B, N]
        past = torch.arange(past_k.shape[3])[None, None, :] < cache_lens[:, None, None]   # [B, 1, P]
        tree = unpack_mask(packed, N) | (node[:, None] == node[None, :])[None]   # a node always sees itself
        attend = torch.cat((past.expand(-1, N, -1), tree), dim=-1)    # [B, N, P+N]
        hidden, new_k, new_v, aux = decode(self.model, tokens, positions, past_k, past_v, attend, self.capture)
        return self.model.lm_head(hidden).float(), new_k, new_v, aux

    def outputs(self, verdict, new_k, new_v, aux):
        return (*verdict, new_k, new_v, aux.float()) if self.capture else (*verdict, new_k, new_v)

    def forward(self, tokens, parents, cache_lens, past_k, past_v):
        logits, new_k, new_v, aux = self.score(tokens, parents, cache_lens, past_k, past_v)
        return self.outputs(verify_greedy(tokens, parents, logits), new_k, new_v, aux)


class SampledVerifyStep(TargetVerifyStep):
    """Target verification by rejection sampling: the target's probabilities are computed in the graph
    (:func:`trtspec.onnx.sampling_graph.sampling_probs`), then ``TrtSpecVerifySample`` (trees) or
    ``TrtSpecVerifyBlock`` (chains: ``accepted_nodes`` is then ``0..accepted_len``).

    Extra inputs: draft_probs float32 ``[B, N-1, V]`` (row j: the distribution draft j = node j+1 was drawn
    from), draft_lens int32 ``[B]`` (drafts used per request; later nodes are padding), seed and offset
    int64 ``[B]`` (each request's random stream), temperature float32, top_k int64, top_p float32 ``[B]``.
    Outputs as :class:`TargetVerifyStep`.
    """

    def __init__(self, model: Transformer, capture: tuple[int, ...] = (), *, verify: str = "sample",
                 width: int = 0, siblings_without_replacement: bool = False):
        super().__init__(model, capture)
        if verify not in ("sample", "block"):
            raise ValueError(f"verify must be 'sample' or 'block', got {verify!r}")
        self.verify, self.width, self.swr = verify, width or sort_width(model.config.vocab_size), int(siblings_without_replacement)

    def forward(self, tokens, parents, cache_lens, past_k, past_v, draft_probs, draft_lens, seed, offset,
                temperature, top_k, top_p):
        logits, new_k, new_v, aux = self.score(tokens, parents, cache_lens, past_k, past_v)
        target_probs = sampling_probs(logits, temperature, top_k, top_p, self.width)
        drafts = tokens[:, 1:]
        if self.verify == "sample":
            verdict = verify_sample(drafts, parents, target_probs, draft_probs, seed, offset, draft_lens, self.swr)
        else:
            accepted, bonus = verify_block(drafts, target_probs, draft_probs, seed, offset, draft_lens)
            steps = torch.arange(tokens.shape[1], dtype=torch.int32)[None]
            verdict = (accepted, torch.where(steps <= accepted[:, None], steps, torch.full_like(steps, -1)), bonus)
        return self.outputs(verdict, new_k, new_v, aux)


class DraftStep(nn.Module):
    """Draft model over T new chain tokens.

    Inputs: tokens int64 ``[B, T]``, cache_lens int64 ``[B]``, past_k/past_v ``[L, B, Hkv, P, d]``.
    Outputs: logits float32 ``[B, V]`` at the last new token, new_k/new_v ``[L, B, Hkv, T, d]``.
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def step(self, tokens, cache_lens, past_k, past_v):
        T = tokens.shape[1]
        positions = cache_lens[:, None] + torch.arange(T)[None, :]
        attend = chain_attend(cache_lens, T, past_k.shape[3])
        hidden, new_k, new_v, _ = decode(self.model, tokens, positions, past_k, past_v, attend)
        return self.model.lm_head(hidden[:, -1]).float(), new_k, new_v

    def forward(self, tokens, cache_lens, past_k, past_v):
        return self.step(tokens, cache_lens, past_k, past_v)


class SampledDraftStep(DraftStep):
    """:class:`DraftStep` that also outputs probs float32 ``[B, V]``: the transformed distribution the next
    draft is drawn from (extra inputs temperature float32, top_k int64, top_p float32 ``[B]``)."""

    def __init__(self, model: Transformer, width: int = 0):
        super().__init__(model)
        self.width = width or sort_width(model.config.vocab_size)

    def forward(self, tokens, cache_lens, past_k, past_v, temperature, top_k, top_p):
        logits, new_k, new_v = self.step(tokens, cache_lens, past_k, past_v)
        probs = sampling_probs(logits[:, None], temperature, top_k, top_p, self.width)[:, 0]
        return logits, probs, new_k, new_v


class Eagle3DraftStep(nn.Module):
    """An EAGLE-3 head over T new chain entries, functionally (:class:`trtspec.runtime.models.Eagle3Head`).

    Entry t is ``(g_t, tokens[:, t])`` with ``g_t = fc(aux_hidden[:, t])`` where ``from_aux[:, t]`` (a
    committed token's target features) and ``g_t = hidden[:, t]`` otherwise (the head's own output
    after the previous draft)::

        a = cat(input_layernorm(embed(token)), hidden_norm(g));  h = g + attn(a);  h += mlp(norm(h))

    Inputs: tokens int64 ``[B, T]``, aux_hidden float32 ``[B, T, k*E_target]``, hidden float32
    ``[B, T, E]``, from_aux bool ``[B, T]``, cache_lens int64 ``[B]``, past_k/past_v ``[1, B, Hkv, P, d]``.
    Outputs at the last entry: logits float32 ``[B, V_draft]``, next_token int64 ``[B]`` (the target id
    of their argmax, through d2t), hidden_out float32 ``[B, E]`` (h, the next draft's g); and
    new_k/new_v ``[1, B, Hkv, T, d]``.
    """

    def __init__(self, head: Eagle3Head, target: Transformer):
        super().__init__()
        self.head, self.embed = head, target.model.embed_tokens

    def forward(self, tokens, aux_hidden, hidden, from_aux, cache_lens, past_k, past_v):
        head, layer = self.head, self.head.layers[0]
        T = tokens.shape[1]
        positions = cache_lens[:, None] + torch.arange(T)[None, :]
        bias = _bias(chain_attend(cache_lens, T, past_k.shape[3]))
        cos, sin = rope_cos_sin(positions, head.inv_freq, torch.float32, head.config.layer.rope.attention_scale())
        g = torch.where(from_aux[..., None], head.fc(aux_hidden), hidden)
        a = torch.cat((layer.input_layernorm(self.embed(tokens)), layer.hidden_norm(g)), dim=-1)
        out, k, v = _attention(layer.self_attn, a, cos, sin, past_k[0], past_v[0], bias)
        h = g + out
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        last = h[:, -1]
        logits = head.lm_head(head.norm(last)).float()
        next_token = head.target_ids()[logits.argmax(-1)]
        return logits, next_token, last, k[None], v[None]
