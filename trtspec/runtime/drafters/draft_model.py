"""``draft_model``: an independent smaller LM sharing the target's vocabulary."""
from __future__ import annotations

import torch

from trtspec.runtime import masks
from trtspec.runtime.drafters.base import TreeDrafter
from trtspec.runtime.models import Transformer


class DraftModelDrafter(TreeDrafter):
    """Its cache row ``r.row`` holds K/V for ``r.tokens[:seen]``; each proposal first feeds the
    unseen committed tokens (the root last), then expands the tree level by level.

    After a greedy chain, drafts ``1..L-1`` already sit in the cache at their slots and positions
    with the causal context of committed tokens, so :meth:`commit` counts the accepted ones as seen:
    the next catch-up feeds only the bonus token (and draft L when all L were accepted).
    """

    name = "draft_model"

    def __init__(self, model: Transformer):
        self.model = model
        self.device = model.lm_head.weight.device
        self.cache = None
        self.seen: dict[int, int] = {}    # row -> committed tokens in the draft cache
        self.fed: dict[int, int] = {}     # row -> drafts of the last greedy chain in the cache

    def reserve(self, rows, slots):
        self.cache = self.model.new_cache(rows, slots)
        self.seen, self.fed = {}, {}

    def chain_fed(self, reqs, drafts):
        self.fed = {r.row: drafts for r in reqs}

    def commit(self, reqs, path_aux, path_len):
        """Accepted drafts the last greedy chain already wrote (slots ``seen..seen+k-1``) count as seen."""
        fed, self.fed = self.fed, {}
        if fed:
            for r, n in zip(reqs, path_len.tolist()):
                if r.row in fed:
                    self.seen[r.row] += min(n - 1, fed[r.row])

    def cache_slots(self):
        return self.cache.slots

    def admit(self, reqs, prefill_aux):
        for r in reqs:
            self.seen[r.row] = 0

    def prefill(self, reqs):
        """Feed the prompts but their last token (the root, fed with the first proposal), so that a
        step never pads its batch's catch-up to a newcomer's prompt length."""
        todo = [r for r in reqs if len(r.tokens) > 1 and self.seen[r.row] == 0]
        if todo:
            self._feed_tokens(todo, [r.tokens[:-1] for r in todo])

    def release(self, req):
        self.seen.pop(req.row, None)
        self.fed.pop(req.row, None)

    def backlog(self, req):
        return len(req.tokens) - self.seen.get(req.row, 0)

    def catch_up(self, reqs):
        """Feed ``r.tokens[seen:]`` (root last) causally; returns root logits ``[B, V]``, None, base ``[B]``."""
        hidden, lens, counts = self._feed_tokens(reqs, [r.tokens[self.seen[r.row]:] for r in reqs])
        last = hidden[torch.arange(len(reqs), device=self.device), counts - 1]
        return self.model.logits(last), None, lens + counts - 1

    def _feed_tokens(self, reqs, todo):
        """Feed ``todo[i]`` (tokens after the ``seen`` ones) of each request causally; -> hidden ``[B, T, E]``,
        the old ``seen`` ``[B]`` and the counts fed ``[B]``."""
        lens = torch.tensor([self.seen[r.row] for r in reqs], device=self.device)
        T = max(len(t) for t in todo)
        tokens = torch.zeros(len(reqs), T, dtype=torch.int64, device=self.device)
        for i, t in enumerate(todo):
            tokens[i, : len(t)] = torch.tensor(t, device=self.device)
        counts = torch.tensor([len(t) for t in todo], device=self.device)
        positions, write_idx, mask = masks.chain_block(lens, counts, T, self.cache.slots)
        rows = torch.tensor([r.row for r in reqs], device=self.device)
        hidden, _ = self.model(tokens, positions, self.cache, rows, write_idx, mask)
        for r, n in zip(reqs, counts.tolist()):
            self.seen[r.row] += n
        return hidden, lens, counts

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        hidden, _ = self.model(tokens, positions, self.cache, rows, write_idx, mask)
        return self.model.logits(hidden), None
