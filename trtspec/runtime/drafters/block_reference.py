"""Step-by-step reference of one DFlash / DSpark block draft: plain loops over layers, heads and positions,
no cache, no batching, no masks. The runtime's drafters (:mod:`trtspec.runtime.drafters.dflash`,
:mod:`~trtspec.runtime.drafters.dspark`) are tested to equal it.

Inputs are the head's tensors (a state dict in the export's names), its config, the target's embedding and
lm_head weights, and the target layer outputs of the context tokens at ``target_layer_ids`` (already as the
head was trained on them, see :func:`trtspec.runtime.block_head.capture_features`).
"""
from __future__ import annotations

import math

import torch


def _norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return w * (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, pos: int, inv_freq: torch.Tensor, scale: float) -> torch.Tensor:
    """RoPE of one head vector ``x [d]`` at position ``pos`` (Hugging Face half-split layout)."""
    half = x.shape[-1] // 2
    ang = pos * inv_freq.float()
    cos, sin = (torch.cos(ang) * scale).to(x.dtype), (torch.sin(ang) * scale).to(x.dtype)
    a, b = x[:half], x[half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin])


def _linear(sd: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    y = x @ sd[f"{name}.weight"].T
    return y + sd[f"{name}.bias"] if f"{name}.bias" in sd else y


def block_logits(sd: dict, cfg, embed_w: torch.Tensor, lm_head_w: torch.Tensor, ctx_aux: torch.Tensor,
                 root: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One block: (backbone logits ``[block_size, V]``, final-normed hidden ``[block_size, E]``).

    ``cfg``: a :class:`~trtspec.runtime.block_head.BlockConfig`; ``ctx_aux``: ``[n, k*E]`` target layer outputs
    of context tokens ``0..n-1``; the root sits at position ``n``.
    """
    c = cfg.layer
    n, T, eps = ctx_aux.shape[0], cfg.block_size, c.rms_norm_eps
    H, Hkv, d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    inv_freq, scale = c.rope.inv_freq(d), c.rope.attention_scale()
    feats = [_norm(_linear(sd, "fc", ctx_aux[t]), sd["hidden_norm.weight"], eps) for t in range(n)]
    h = [embed_w[root]] + [embed_w[cfg.mask_token_id] for _ in range(T - 1)]
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        x = [_norm(v, sd[p + "input_layernorm.weight"], eps) for v in h]

        def kv(vec, pos):
            k = _linear(sd, p + "self_attn.k_proj", vec).view(Hkv, d)
            v = _linear(sd, p + "self_attn.v_proj", vec).view(Hkv, d)
            k = torch.stack([_rotate(_norm(k[j], sd[p + "self_attn.k_norm.weight"], eps), pos, inv_freq, scale)
                             for j in range(Hkv)])
            return k, v

        keys = [kv(feats[t], t) for t in range(n)] + [kv(x[t], n + t) for t in range(T)]
        new_h = []
        for t in range(T):
            q = _linear(sd, p + "self_attn.q_proj", x[t]).view(H, d)
            heads = []
            for j in range(H):
                qj = _rotate(_norm(q[j], sd[p + "self_attn.q_norm.weight"], eps), n + t, inv_freq, scale)
                kvh = j // (H // Hkv)
                seen = list(range(n)) + [n + s for s in range(T) if not cfg.causal or s <= t]
                scores = torch.stack([qj @ keys[s][0][kvh] for s in seen]) / math.sqrt(d)
                w = torch.softmax(scores.float(), 0).to(qj.dtype)
                heads.append(sum(w[m] * keys[s][1][kvh] for m, s in enumerate(seen)))
            a = h[t] + _linear(sd, p + "self_attn.o_proj", torch.cat(heads))
            m = _norm(a, sd[p + "post_attention_layernorm.weight"], eps)
            gate = _linear(sd, p + "mlp.gate_proj", m)
            new_h.append(a + _linear(sd, p + "mlp.down_proj", gate * torch.sigmoid(gate) * _linear(sd, p + "mlp.up_proj", m)))
        h = new_h
    hidden = torch.stack([_norm(v, sd["norm.weight"], eps) for v in h])
    return (hidden @ lm_head_w.T).float(), hidden


def markov_bias(sd: dict, cfg, prev: int, hidden: torch.Tensor, state):
    """DSpark's bias ``[V]`` for one position from the previous token and the position's hidden state."""
    e = sd["markov_w1.weight"][prev]
    if cfg.markov_head_type == "vanilla":
        return _linear(sd, "markov_w2", e), state
    if cfg.markov_head_type == "gated":
        gate = torch.sigmoid(_linear(sd, "gate_proj", torch.cat([hidden, e])))
        return _linear(sd, "markov_w2", gate * e), state
    state = torch.zeros(cfg.markov_rank, dtype=e.dtype) if state is None else state
    g, cand, out = _linear(sd, "joint_proj", torch.cat([state, e, hidden])).chunk(3)
    g = torch.sigmoid(g)
    state = g * state + (1 - g) * torch.tanh(cand)
    return _linear(sd, "markov_w2", torch.tanh(out)), state


def greedy_block_draft(sd: dict, cfg, embed_w, lm_head_w, ctx_aux, root: int) -> tuple[list[int], torch.Tensor]:
    """Greedy drafts of one block and the logits each was the argmax of (``[drafts, V]``):
    DFlash positions ``1..block_size-1``; DSpark all positions, left to right with the Markov bias."""
    logits, hidden = block_logits(sd, cfg, embed_w, lm_head_w, ctx_aux, root)
    if cfg.drafter == "dflash":
        return logits[1:].argmax(-1).tolist(), logits[1:]
    prev, state, out, rows = root, None, [], []
    for k in range(cfg.block_size):
        bias, state = markov_bias(sd, cfg, prev, hidden[k], state)
        row = logits[k] + bias.float()
        prev = int(row.argmax())
        out.append(prev)
        rows.append(row)
    return out, torch.stack(rows)
