"""The drafter interface and the top-k tree expansion shared by model-based drafters.

A drafter proposes, per request, a tree whose node 0 is the *root* (the last committed token,
not yet in the target's cache) and whose other nodes are draft tokens::

    propose(requests, depths, mode) -> Proposal(tokens, parents, num_nodes, draft_probs)

A chain of D drafts is the tree with branching 1. With branching K and depth L the tree has
``1 + K + (L-1)*K^2`` nodes: the root's K children, then at every further level the K
best-scoring nodes of the level above (score = cumulative draft log-probability) each get K
children. ``draft_probs[b, j]`` is the distribution draft ``j`` (node ``j + 1``) was drawn from, its
parent's transformed draft distribution (the sampled verifiers' per-draft layout, see
:mod:`trtspec.ops`); children are ``top-K`` in greedy mode, and in sample mode K i.i.d. draws
(or a Gumbel-top-K draw without replacement).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from trtspec.runtime import masks
from trtspec.runtime.params import tree_size
from trtspec.runtime.sampling import draw_per_request, probs_per_request


@dataclass
class Proposal:
    """tokens int64 ``[B, N]`` (node 0 = root); parents int64 ``[B, N]``; num_nodes int64 ``[B]``;
    depth int64 ``[B, N]``; draft_probs float32 ``[B, N - 1, V]`` in sample mode (row j: the
    distribution draft j = node j + 1 was drawn from), else None."""

    tokens: torch.Tensor
    parents: torch.Tensor
    num_nodes: torch.Tensor
    depth: torch.Tensor
    draft_probs: torch.Tensor | None = None


@dataclass(frozen=True)
class DraftMode:
    """How children are chosen. ``sample``: draw from the transformed draft distribution (needed by
    sample/block verification); ``without_replacement``: Gumbel-top-K siblings; ``generators``: one
    random stream per request, in batch order (:func:`trtspec.runtime.sampling.generators`), so a
    request's drafts do not depend on its neighbours."""

    sample: bool
    without_replacement: bool = False
    generators: tuple[torch.Generator, ...] = ()


def chain_proposal(roots: torch.Tensor) -> Proposal:
    """The empty proposal: only the roots (D = 0)."""
    B = roots.shape[0]
    zeros = torch.zeros(B, 1, dtype=torch.int64, device=roots.device)
    return Proposal(roots[:, None].long(), zeros - 1, torch.ones(B, dtype=torch.int64, device=roots.device), zeros)


class Drafter:
    """Base class. Subclasses own their caches and implement propose/commit; the engine calls
    ``reserve`` once, ``admit`` after a request's prefill, ``commit`` after every verification."""

    name = "none"
    capture_layers: tuple[int, ...] = ()   # target layers whose outputs commit() needs
    max_branching: int = 1                 # 1: chains only

    def fork(self) -> "Drafter":
        """A drafter sharing this one's weights with its own (empty) state; each engine uses its own."""
        return copy.copy(self)

    def reserve(self, rows: int, slots: int) -> None:
        """Allocate state for ``rows`` requests of up to ``slots`` cache slots (and forget any old state)."""

    def admit(self, reqs, prefill_aux: torch.Tensor | None) -> None:
        pass

    def prefill(self, reqs) -> None:
        """Optionally feed newly admitted requests' prompts now (after :meth:`admit`) rather than at their
        first proposal; an adaptive engine calls it at the start of a step that drafts, for the batch."""

    def backlog(self, req) -> int:
        """Committed tokens the drafter must feed for ``req`` before it drafts (0: it keeps no cache)."""
        return 0

    def propose(self, reqs, depths: list[int], branching: int, mode: DraftMode) -> Proposal:
        raise NotImplementedError

    def commit(self, reqs, path_aux: torch.Tensor | None, path_len: torch.Tensor) -> None:
        pass

    def release(self, req) -> None:
        pass

    def can_draft(self, req) -> bool:
        return True


class TreeDrafter(Drafter):
    """A drafter backed by a model with its own KV cache: catch up on committed tokens, then expand.

    Subclasses provide :meth:`catch_up` (feed what the model has not seen; returns the root's
    logits, state and the slot ``base`` of the root) and :meth:`forward_nodes` (one tree level).
    Node ``n`` is written to slot ``base + n`` at position ``base + depth(n)``; it attends to the
    committed slots ``0..base`` and to its ancestors.
    """

    max_branching = 64

    def catch_up(self, reqs) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        raise NotImplementedError

    def forward_nodes(self, rows, tokens, parent_state, positions, write_idx, mask):
        """-> (logits float32 ``[B, M, V']``, state ``[B, M, ...]`` or None). ``V'`` is the drafter's own
        vocabulary: :meth:`full_logits` maps it to the target's, :meth:`token_ids` maps its argmax ids."""
        raise NotImplementedError

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the target vocabulary from the drafter's (identity unless the draft vocabulary is reduced)."""
        return logits

    def token_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Target token ids of drafter vocabulary ids (identity unless the draft vocabulary is reduced)."""
        return ids

    def cache_slots(self) -> int:
        raise NotImplementedError

    def chain_fed(self, reqs, drafts: int) -> None:
        """Called after a greedy chain proposal that fed drafts ``1..drafts`` to the model (slots
        ``base + 1..base + drafts``, chain positions); a drafter whose cache entries are then exactly
        those of committed tokens may skip re-feeding the accepted ones (see ``draft_model``)."""

    @torch.inference_mode()
    def propose(self, reqs, depths, branching, mode):
        device = self.device
        roots = torch.tensor([r.tokens[-1] for r in reqs], device=device)
        L, K = max(depths), branching
        if L == 0:
            return chain_proposal(roots)
        rows = torch.tensor([r.row for r in reqs], device=device)
        if K == 1 and not mode.sample:
            return self._greedy_chain(reqs, rows, roots, depths)
        logits, state, base = self.catch_up(reqs)                     # [B, V'], [B, E] | None, [B]
        logits = self.full_logits(logits)                              # [B, V]
        B, V = logits.shape
        N = tree_size(K, L)
        tokens = torch.zeros(B, N, dtype=torch.int64, device=device)
        parents = torch.full((B, N), -1, dtype=torch.int64, device=device)
        depth = torch.zeros(B, N, dtype=torch.int64, device=device)
        score = torch.zeros(B, N, device=device)
        anc = torch.zeros(B, N, N, dtype=torch.bool, device=device)
        anc[:, 0, 0] = True
        tokens[:, 0] = roots
        states = None if state is None else state.new_zeros(B, N, *state.shape[1:])
        if states is not None:
            states[:, 0] = state
        dprobs = torch.zeros(B, N - 1, V, device=device) if mode.sample else None    # row j: draft j = node j+1
        frontier = torch.zeros(B, 1, dtype=torch.int64, device=device)   # node ids being expanded
        level_logits = logits[:, None]                                    # [B, F, V]
        b_idx = torch.arange(B, device=device)[:, None]
        n = 1
        for level in range(1, L + 1):
            F_ = frontier.shape[1]
            q = probs_per_request(level_logits, [r.sampling for r in reqs]) if mode.sample else None   # [B, F, V]
            new = torch.arange(n, n + F_ * K, device=device)
            if mode.sample:
                dprobs[:, new - 1] = q[:, :, None].expand(B, F_, K, V).reshape(B, F_ * K, V)   # each child: its parent's q
                kids = draw_per_request(q, K, replacement=not mode.without_replacement, gens=mode.generators)
                logq = torch.log(torch.gather(q, 2, kids).clamp_min(1e-30))
            else:
                top = torch.topk(torch.log_softmax(level_logits, -1), K, dim=-1)
                kids, logq = top.indices, top.values
            par = frontier[:, :, None].expand(B, F_, K).reshape(B, F_ * K)
            tokens[:, new] = kids.reshape(B, -1)
            parents[:, new] = par
            depth[:, new] = level
            score[:, new] = torch.gather(score, 1, par) + logq.reshape(B, -1)
            anc[:, new] = anc[b_idx, par]
            anc[:, new, new] = True
            n += F_ * K
            if level == L:
                break
            pick = torch.topk(score[:, new], min(K, F_ * K), dim=-1).indices + new[0]   # [B, K] next frontier
            level_logits, st = self._feed(rows, base, tokens, depth, anc, states, parents, pick, n)
            level_logits = self.full_logits(level_logits)
            if states is not None:
                states[b_idx, pick] = st
            frontier = pick
        num_nodes = torch.tensor([tree_size(K, d) for d in depths], device=device)
        return Proposal(tokens, parents, num_nodes, depth, dprobs)

    def _greedy_chain(self, reqs, rows, roots, depths) -> Proposal:
        """The greedy chain (branching 1) without tree bookkeeping: draft n = argmax of the draft's
        logits after node n-1 (the top-1 of the expansion above; only a tie between two logits can
        resolve differently, which changes a draft, never the verified output).

        Node n is written to slot ``base + n`` at position ``base + n`` and sees slots ``0..base+n``:
        the inputs :meth:`_feed` builds for a chain, without the ancestor matrix.
        """
        device, B, L = self.device, len(reqs), max(depths)
        logits, state, base = self.catch_up(reqs)                     # [B, V], [B, E] | None, [B]
        tokens = torch.empty(B, L + 1, dtype=torch.int64, device=device)
        tokens[:, 0] = roots
        tokens[:, 1] = self.token_ids(logits.argmax(-1))
        if L > 1:
            slot = base[:, None].clone()                                   # [B, 1]
            width = int(base.max()) + 1                                    # S' of node n: width + n
            j = torch.arange(width + L, device=device)
            for n in range(1, L):
                slot = slot + 1
                mask = j[None, None, : width + n] <= slot[:, :, None]      # [B, 1, S']
                logits, state = self.forward_nodes(rows, tokens[:, n:n + 1], None if state is None else state[:, None],
                                                   slot, slot, mask)
                state = None if state is None else state[:, 0]
                tokens[:, n + 1] = self.token_ids(logits[:, 0].argmax(-1))
        self.chain_fed(reqs, L - 1)
        node = torch.arange(L + 1, device=device)
        num_nodes = torch.tensor(depths, device=device) + 1
        return Proposal(tokens, (node - 1).expand(B, L + 1).contiguous(), num_nodes,
                        node.expand(B, L + 1).contiguous(), None)

    def _feed(self, rows, base, tokens, depth, anc, states, parents, nodes, n):
        """Run the frontier ``nodes [B, M]`` through the draft model; returns their logits and states."""
        B, M = nodes.shape
        b_idx = torch.arange(B, device=nodes.device)[:, None]
        visible = anc[b_idx, nodes][:, :, 1:n]                    # window = nodes 1..n-1 at slots base+1..
        slots = base[:, None] + nodes
        pos = base[:, None] + depth[b_idx, nodes]
        valid = torch.ones(B, M, dtype=torch.bool, device=nodes.device)
        positions, write_idx, mask = masks.block_inputs(base + 1, visible, valid, slots, pos, self.cache_slots())
        parent_state = None if states is None else states[b_idx, parents[b_idx, nodes]]
        return self.forward_nodes(rows, tokens[b_idx, nodes], parent_state, positions, write_idx, mask)
