"""``mtp``: the target's own multi-token-prediction layer (DeepSeek-V3, arXiv 2412.19437 §2.2), chained D times.

The layer keeps one cache entry per committed position t (:mod:`trtspec.runtime.drafters.entries`):
``(h_t, x_{t+1})`` with ``h_t`` the target's final normed hidden state of ``x_t``; the entry at t predicts
``x_{t+2}`` (see :class:`trtspec.runtime.deepseek.MTPLayer`). Draft n+1 then feeds draft n with the layer's own
output ``g`` as its state: one MTP layer chained D times, as TensorRT-LLM's MTP-Eagle and vLLM/SGLang run a
one-layer checkpoint at D > 1. Chains and top-k trees, greedy or sampled drafts (:class:`TreeDrafter`).
"""
from __future__ import annotations

from trtspec.runtime.deepseek import DeepseekTransformer, MTPLayer
from trtspec.runtime.drafters.entries import EntryDrafter


class MTPDrafter(EntryDrafter):
    name = "mtp"

    def __init__(self, layer: MTPLayer, target: DeepseekTransformer):
        self.layer, self.target = layer, target
        self.device = layer.eh_proj.weight.device
        self.capture_layers = (target.config.num_hidden_layers,)        # the final normed hidden state
        self.state_width, self.state_dtype = layer.config.hidden_size, layer.eh_proj.weight.dtype

    def new_cache(self, rows, slots):
        return self.layer.new_cache(rows, slots)

    def entry_states(self, aux):
        return aux

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        g, logits = self.layer(tokens, parent_state, positions, self.cache, rows, write_idx, mask)
        return logits, g
