"""``eagle3``: an EAGLE-3 head (Li et al. 2025, arXiv 2503.01840) in NVIDIA Model-Optimizer's export layout.

The head keeps one cache *entry* per committed position t: the pair (g_t, x_{t+1}) where
``g_t = fc(cat(target hidden states of x_t at the captured layers))``; the entry at t predicts
x_{t+2}. After a step that accepted the path ``root, a_1..a_k`` and emitted the bonus token,
the new entries are ``(g(root), a_1), ..., (g(a_k), bonus)``; the last one predicts the first
draft of the next step. Deeper drafts feed the head's own pre-norm output as g.
"""
from __future__ import annotations

import torch

from trtspec.runtime import masks
from trtspec.runtime.drafters.base import TreeDrafter
from trtspec.runtime.models import Eagle3Head, Transformer


class Eagle3Drafter(TreeDrafter):
    name = "eagle3"

    def __init__(self, head: Eagle3Head, target: Transformer):
        self.head, self.target = head, target
        self.device = head.lm_head.weight.device
        self.capture_layers = tuple(head.config.aux_layer_ids)
        self.cache = None
        self.seen: dict[int, int] = {}                                   # row -> entries in the cache
        self.pending: dict[int, tuple[torch.Tensor, list[int]]] = {}     # row -> (g [M, E], tokens [M])
        self.reduced = head.config.draft_vocab_size < head.config.layer.vocab_size
        self.ids = head.target_ids()                                     # draft id -> target id

    def reserve(self, rows, slots):
        self.cache = self.head.new_cache(rows, slots)
        self.seen, self.pending = {}, {}

    def cache_slots(self):
        return self.cache.slots

    def can_draft(self, req):
        return self.seen.get(req.row, 0) + len(self.pending[req.row][1]) > 0

    def _append(self, row: int, aux: torch.Tensor, tokens: list[int]) -> None:
        g = self.head.fc(aux.to(self.head.fc.weight.dtype))
        old_g, old_t = self.pending[row]
        self.pending[row] = (torch.cat([old_g, g]), old_t + tokens)

    @torch.no_grad()
    def admit(self, reqs, prefill_aux):
        """prefill_aux ``[B, T, k*E]``: target features of prompt tokens 0..n-2 (the root n-1 is not prefilled)."""
        for i, r in enumerate(reqs):
            self.seen[r.row] = 0
            self.pending[r.row] = (torch.zeros(0, self.head.fc.out_features, device=self.device), [])
            n = len(r.tokens) - 1
            if n > 0:
                self._append(r.row, prefill_aux[i, :n], r.tokens[1:n + 1])

    @torch.no_grad()
    def prefill(self, reqs):
        """Feed the head every pending entry but the last (which predicts the first draft), so that a
        step never pads its batch's catch-up to a newcomer's prompt length."""
        todo = [r for r in reqs if len(self.pending[r.row][1]) > 1]
        if todo:
            self._run_pending(todo, [len(self.pending[r.row][1]) - 1 for r in todo])

    @torch.no_grad()
    def commit(self, reqs, path_aux, path_len):
        """path_aux ``[B, L, k*E]`` of the accepted path (root first), path_len ``[B]`` = accepted + 1;
        ``r.tokens`` already ends with the accepted tokens and the bonus."""
        for i, r in enumerate(reqs):
            m = int(path_len[i])
            self._append(r.row, path_aux[i, :m], r.tokens[len(r.tokens) - m:])

    def release(self, req):
        self.seen.pop(req.row, None)
        self.pending.pop(req.row, None)

    def catch_up(self, reqs):
        logits, g_out, lens, counts = self._run_pending(reqs, [len(self.pending[r.row][1]) for r in reqs])
        last = (counts - 1).clamp(min=0)
        b = torch.arange(len(reqs), device=self.device)
        return logits[b, last], g_out[b, last], lens + counts - 1

    def _run_pending(self, reqs, take: list[int]):
        """Feed the first ``take[i]`` pending entries of each request to the head (they become seen);
        -> logits ``[B, T, V']``, states ``[B, T, E]``, the old ``seen`` ``[B]`` and ``take`` ``[B]``."""
        B = len(reqs)
        lens = torch.tensor([self.seen[r.row] for r in reqs], device=self.device)
        counts = torch.tensor(take, device=self.device)
        T = max(int(counts.max()), 1)
        E = self.head.fc.out_features
        g = torch.zeros(B, T, E, device=self.device, dtype=self.head.fc.weight.dtype)
        tokens = torch.zeros(B, T, dtype=torch.int64, device=self.device)
        for i, r in enumerate(reqs):
            pg, pt = self.pending[r.row]
            g[i, : take[i]] = pg[: take[i]]
            tokens[i, : take[i]] = torch.tensor(pt[: take[i]], dtype=torch.int64, device=self.device)
        positions, write_idx, mask = masks.chain_block(lens, counts, T, self.cache.slots)
        rows = torch.tensor([r.row for r in reqs], device=self.device)
        g_out, logits = self.head(self.target.embed(tokens), g, positions, self.cache, rows, write_idx, mask,
                                  draft_vocab=True)
        for r, n in zip(reqs, take):
            self.seen[r.row] += n
            pg, pt = self.pending[r.row]
            self.pending[r.row] = (pg[n:], pt[n:])
        return logits, g_out, lens, counts

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        g_out, logits = self.head(self.target.embed(tokens), parent_state, positions, self.cache, rows, write_idx, mask,
                                  draft_vocab=True)
        return logits, g_out

    def full_logits(self, logits):
        return self.head.target_logits(logits)

    def token_ids(self, ids):
        return self.ids[ids] if self.reduced else ids
