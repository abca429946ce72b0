"""Drafters that keep one cache *entry* per committed position: EAGLE-3 heads and MTP layers.

The entry at position t is the pair ``(s_t, x_{t+1})``: a state derived from the target's hidden states of
``x_t`` (:meth:`EntryDrafter.entry_states`) and the next committed token; it predicts ``x_{t+2}``. Entries wait
in ``pending`` until the drafter's own cache takes them (:meth:`EntryDrafter.catch_up`, or
:meth:`EntryDrafter.prefill` for a newcomer's prompt). After a step that accepted the path ``root, a_1..a_k``
and emitted the bonus token, the new entries are ``(s(root), a_1), ..., (s(a_k), bonus)``; the last one
predicts the first draft of the next step.
"""
from __future__ import annotations

import torch

from trtspec.runtime import masks
from trtspec.runtime.drafters.base import TreeDrafter


class EntryDrafter(TreeDrafter):
    """Subclasses set ``device``, ``capture_layers``, ``state_width`` (entries' state size) and implement
    :meth:`new_cache`, :meth:`entry_states` and :meth:`forward_nodes`."""

    cache = None

    def new_cache(self, rows: int, slots: int):
        raise NotImplementedError

    def entry_states(self, aux: torch.Tensor) -> torch.Tensor:
        """States ``[M, state_width]`` of entries from the captured target features ``aux`` ``[M, ...]``."""
        raise NotImplementedError

    def reserve(self, rows, slots):
        self.cache = self.new_cache(rows, slots)
        self.seen: dict[int, int] = {}                                    # row -> entries in the cache
        self.pending: dict[int, tuple[torch.Tensor, list[int]]] = {}      # row -> (states [M, E], tokens [M])

    def cache_slots(self):
        return self.cache.slots

    def can_draft(self, req):
        return self.seen.get(req.row, 0) + len(self.pending[req.row][1]) > 0

    def _append(self, row: int, aux: torch.Tensor, tokens: list[int]) -> None:
        states = self.entry_states(aux)
        old, old_t = self.pending[row]
        self.pending[row] = (torch.cat([old, states.to(old.dtype)]), old_t + tokens)

    @torch.no_grad()
    def admit(self, reqs, prefill_aux):
        """prefill_aux ``[B, T, ...]``: target features of prompt tokens 0..n-2 (the root n-1 is not prefilled)."""
        for i, r in enumerate(reqs):
            self.seen[r.row] = 0
            self.pending[r.row] = (torch.zeros(0, self.state_width, device=self.device, dtype=self.state_dtype), [])
            n = len(r.tokens) - 1
            if n > 0:
                self._append(r.row, prefill_aux[i, :n], r.tokens[1:n + 1])

    @torch.no_grad()
    def prefill(self, reqs):
        """Feed every pending entry but the last (which predicts the first draft), so that a step never pads its
        batch's catch-up to a newcomer's prompt length (a width that could run past the cache)."""
        todo = [r for r in reqs if len(self.pending[r.row][1]) > 1]
        if todo:
            self._run_pending(todo, [len(self.pending[r.row][1]) - 1 for r in todo])

    @torch.no_grad()
    def commit(self, reqs, path_aux, path_len):
        """path_aux ``[B, L, ...]`` along the accepted path (root first), path_len ``[B]`` = accepted + 1;
        ``r.tokens`` already ends with the accepted tokens and the bonus."""
        for i, r in enumerate(reqs):
            m = int(path_len[i])
            self._append(r.row, path_aux[i, :m], r.tokens[len(r.tokens) - m:])

    def release(self, req):
        self.seen.pop(req.row, None)
        self.pending.pop(req.row, None)

    def backlog(self, req):
        return len(self.pending[req.row][1]) if req.row in self.pending else 0

    def catch_up(self, reqs):
        """Feed the pending entries causally; returns (logits ``[B, V']``, state ``[B, E]``, slot of the last entry)."""
        logits, states, lens, counts = self._run_pending(reqs, [len(self.pending[r.row][1]) for r in reqs])
        last = (counts - 1).clamp(min=0)
        b = torch.arange(len(reqs), device=self.device)
        return logits[b, last], states[b, last], lens + counts - 1

    def _run_pending(self, reqs, take: list[int]):
        """Feed the first ``take[i]`` pending entries of each request (they become seen);
        -> logits ``[B, T, V']``, states ``[B, T, E]``, the old ``seen`` ``[B]`` and ``take`` ``[B]``."""
        B = len(reqs)
        lens = torch.tensor([self.seen[r.row] for r in reqs], device=self.device)
        counts = torch.tensor(take, device=self.device)
        T = max(int(counts.max()), 1)
        states = torch.zeros(B, T, self.state_width, device=self.device, dtype=self.state_dtype)
        tokens = torch.zeros(B, T, dtype=torch.int64, device=self.device)
        for i, r in enumerate(reqs):
            ps, pt = self.pending[r.row]
            states[i, : take[i]] = ps[: take[i]]
            tokens[i, : take[i]] = torch.tensor(pt[: take[i]], dtype=torch.int64, device=self.device)
        positions, write_idx, mask = masks.chain_block(lens, counts, T, self.cache.slots)
        rows = torch.tensor([r.row for r in reqs], device=self.device)
        logits, out = self.forward_nodes(rows, tokens, states, positions, write_idx, mask)
        for r, n in zip(reqs, take):
            self.seen[r.row] += n
            ps, pt = self.pending[r.row]
            self.pending[r.row] = (ps[n:], pt[n:])
        return logits, out, lens, counts
