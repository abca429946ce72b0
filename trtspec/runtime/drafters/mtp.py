"""``mtp``: the target's own multi-token-prediction layer (DeepSeek-V3, arXiv 2412.19437 §2.2), chained D times.

The layer keeps one cache *entry* per committed position t: ``(h_t, x_{t+1})`` with ``h_t`` the target's
final normed hidden state of ``x_t``; the entry at t predicts ``x_{t+2}`` (see
:class:`trtspec.runtime.deepseek.MTPLayer`). After a step that accepted the path ``root, a_1..a_k`` and
emitted the bonus token, the new entries are ``(h(root), a_1), ..., (h(a_k), bonus)``; the last one
predicts the first draft of the next step. Draft n+1 then feeds draft n with the layer's own output ``g``
as its state: one MTP layer chained D times, as TensorRT-LLM's MTP-Eagle and vLLM/SGLang run a
one-layer checkpoint at D > 1. Chains and top-k trees, greedy or sampled drafts (:class:`TreeDrafter`).
"""
from __future__ import annotations

import torch

from trtspec.runtime import masks
from trtspec.runtime.deepseek import DeepseekTransformer, MTPLayer
from trtspec.runtime.drafters.base import TreeDrafter


class MTPDrafter(TreeDrafter):
    name = "mtp"

    def __init__(self, layer: MTPLayer, target: DeepseekTransformer):
        self.layer, self.target = layer, target
        self.device = layer.eh_proj.weight.device
        self.capture_layers = (target.config.num_hidden_layers,)        # the final normed hidden state
        self.cache = None
        self.seen: dict[int, int] = {}                                    # row -> entries in the cache
        self.pending: dict[int, tuple[torch.Tensor, list[int]]] = {}      # row -> (h [M, E], tokens [M])

    def reserve(self, rows, slots):
        self.cache = self.layer.new_cache(rows, slots)
        self.seen, self.pending = {}, {}

    def cache_slots(self):
        return self.cache.slots

    def can_draft(self, req):
        return self.seen.get(req.row, 0) + len(self.pending[req.row][1]) > 0

    def _append(self, row: int, h: torch.Tensor, tokens: list[int]) -> None:
        old_h, old_t = self.pending[row]
        self.pending[row] = (torch.cat([old_h, h.to(old_h.dtype)]), old_t + tokens)

    @torch.no_grad()
    def admit(self, reqs, prefill_aux):
        """prefill_aux ``[B, T, E]``: the target's normed hidden states of prompt tokens 0..n-2."""
        E = self.layer.config.hidden_size
        for i, r in enumerate(reqs):
            self.seen[r.row] = 0
            self.pending[r.row] = (torch.zeros(0, E, device=self.device, dtype=self.layer.eh_proj.weight.dtype), [])
            n = len(r.tokens) - 1
            if n > 0:
                self._append(r.row, prefill_aux[i, :n], r.tokens[1:n + 1])

    @torch.no_grad()
    def commit(self, reqs, path_aux, path_len):
        """path_aux ``[B, L, E]`` along the accepted path (root first); ``r.tokens`` ends with it and the bonus."""
        for i, r in enumerate(reqs):
            m = int(path_len[i])
            self._append(r.row, path_aux[i, :m], r.tokens[len(r.tokens) - m:])

    def release(self, req):
        self.seen.pop(req.row, None)
        self.pending.pop(req.row, None)

    @torch.no_grad()
    def prefill(self, reqs):
        """Feed the layer every pending entry but the last (which predicts the first draft), so that a step
        never pads its batch's catch-up to a newcomer's prompt length."""
        todo = [r for r in reqs if len(self.pending[r.row][1]) > 1]
        if todo:
            self._run_pending(todo, [len(self.pending[r.row][1]) - 1 for r in todo])

    def catch_up(self, reqs):
        """Feed the pending entries causally; returns (logits ``[B, V]``, g ``[B, E]``, slot of the last entry)."""
        logits, g, lens, counts = self._run_pending(reqs, [len(self.pending[r.row][1]) for r in reqs])
        last = (counts - 1).clamp(min=0)
        b = torch.arange(len(reqs), device=self.device)
        return logits[b, last], g[b, last], lens + counts - 1

    def _run_pending(self, reqs, take: list[int]):
        """Feed the first ``take[i]`` pending entries of each request to the layer (they become seen);
        -> logits ``[B, T, V]``, states ``[B, T, E]``, the old ``seen`` ``[B]`` and ``take`` ``[B]``."""
        B, E = len(reqs), self.layer.config.hidden_size
        lens = torch.tensor([self.seen[r.row] for r in reqs], device=self.device)
        counts = torch.tensor(take, device=self.device)
        T = max(int(counts.max()), 1)
        h = torch.zeros(B, T, E, device=self.device, dtype=self.layer.eh_proj.weight.dtype)
        tokens = torch.zeros(B, T, dtype=torch.int64, device=self.device)
        for i, r in enumerate(reqs):
            ph, pt = self.pending[r.row]
            h[i, : take[i]] = ph[: take[i]]
            tokens[i, : take[i]] = torch.tensor(pt[: take[i]], dtype=torch.int64, device=self.device)
        positions, write_idx, mask = masks.chain_block(lens, counts, T, self.cache.slots)
        rows = torch.tensor([r.row for r in reqs], device=self.device)
        g, logits = self.layer(tokens, h, positions, self.cache, rows, write_idx, mask)
        for r, n in zip(reqs, take):
            self.seen[r.row] += n
            ph, pt = self.pending[r.row]
            self.pending[r.row] = (ph[n:], pt[n:])
        return logits, g, lens, counts

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        g, logits = self.layer(tokens, parent_state, positions, self.cache, rows, write_idx, mask)
        return logits, g
