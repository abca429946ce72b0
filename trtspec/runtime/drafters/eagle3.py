"""``eagle3``: an EAGLE-3 head (Li et al. 2025, arXiv 2503.01840) in NVIDIA Model-Optimizer's export layout.

The head keeps one cache *entry* per committed position t: the pair (g_t, x_{t+1}) where
``g_t = fc(cat(target hidden states of x_t at the captured layers))``; the entry at t predicts
x_{t+2}. After a step that accepted the path ``root, a_1..a_k`` and emitted the bonus token,
the new entries are ``(g(root), a_1), ..., (g(a_k), bonus)``; the last one predicts the first
draft of the next step. Deeper drafts feed the head's own pre-norm output as g.
"""
from __future__ import annotations

from trtspec.runtime.drafters.entries import EntryDrafter
from trtspec.runtime.models import Eagle3Head, Transformer


class Eagle3Drafter(EntryDrafter):
    name = "eagle3"

    def __init__(self, head: Eagle3Head, target: Transformer):
        self.head, self.target = head, target
        self.device = head.lm_head.weight.device
        self.capture_layers = tuple(head.config.aux_layer_ids)
        self.state_width, self.state_dtype = head.fc.out_features, head.fc.weight.dtype
        self.reduced = head.config.draft_vocab_size < head.config.layer.vocab_size
        self.ids = head.target_ids()                                     # draft id -> target id

    def new_cache(self, rows, slots):
        return self.head.new_cache(rows, slots)

    def entry_states(self, aux):
        return self.head.fc(aux.to(self.head.fc.weight.dtype))

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        g_out, logits = self.head(self.target.embed(tokens), parent_state, positions, self.cache, rows, write_idx, mask,
                                  draft_vocab=True)
        return logits, g_out

    def full_logits(self, logits):
        return self.head.target_logits(logits)

    def token_ids(self, ids):
        return self.ids[ids] if self.reduced else ids
