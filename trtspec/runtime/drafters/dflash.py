"""``dflash``: block drafting from a DFlash head (NVIDIA Model-Optimizer export), one draft forward per block.

State per request (cache row ``r.row``): the K/V of every committed token's context feature in each draft
layer, slots ``0..n-1`` for tokens ``0..n-1`` (``n = len(r.tokens) - 1``: every token but the root, i.e.
exactly the tokens whose target hidden states exist). ``admit`` fills it from the prompt's prefill,
``commit`` extends it with the accepted path (root first) of each step; nothing is ever recomputed.

A proposal is one forward of the block ``[root, mask x (block_size - 1)]`` at positions ``n..n+block_size-1``
over the cached context K/V (:class:`trtspec.runtime.block_head.BlockHead`); the block's per-position
distributions are the drafts' distributions: greedy drafts are their argmaxes, sampled drafts are drawn from
the transformed (temperature / top-k / top-p) distributions with the request's own generator, and those are
the ``draft_probs`` the sample / block verifiers receive. A request drafts D <= the block's drafts
(:func:`trtspec.runtime.block_head.block_drafts`); the block is always run whole, so its first D drafts
do not depend on D.
"""
from __future__ import annotations

import torch

from trtspec.runtime.block_head import BlockHead, capture_features
from trtspec.runtime.drafters.base import Drafter, DraftMode, Proposal, chain_proposal
from trtspec.runtime.models import KVCache, Transformer
from trtspec.runtime.sampling import draw_per_request, probs_per_request


class DFlashDrafter(Drafter):
    name = "dflash"

    def __init__(self, head: BlockHead, target: Transformer):
        self.head, self.target = head, target
        self.device = head.fc.weight.device
        self.capture_layers = tuple(head.config.target_layer_ids)
        self.max_draft_len = head.config.drafts
        self.cache: KVCache | None = None
        self.ctx: dict[int, int] = {}          # row -> context entries in the cache

    def reserve(self, rows, slots):
        c = self.head.config.layer
        p = self.head.fc.weight
        self.cache = KVCache(c.num_hidden_layers, rows, c.num_key_value_heads, slots, c.head_dim,
                             device=p.device, dtype=p.dtype)
        self.ctx = {}

    def release(self, req):
        self.ctx.pop(req.row, None)

    # -- context ---------------------------------------------------------------------------------
    @torch.no_grad()
    def _extend(self, rows: list[int], aux: list[torch.Tensor]) -> None:
        """Append context entries: request ``rows[i]`` gets the features of ``aux[i] [m_i, k*E]`` at the next slots."""
        rows_, slots, feats = [], [], []
        for row, a in zip(rows, aux):
            m, start = a.shape[0], self.ctx[row]
            if m == 0:
                continue
            rows_ += [row] * m
            slots.append(torch.arange(start, start + m))
            feats.append(a)
            self.ctx[row] = start + m
        if not feats:
            return
        dev = self.device
        slot = torch.cat(slots).to(dev)                                            # [M]
        f = self.head.features(capture_features(self.target, self.head.config, torch.cat(feats).to(dev)))
        kv = self.head.context_kv(f[None], slot[None])                             # per layer [1, Hkv, M, d]
        r = torch.tensor(rows_, device=dev)
        for i, (k, v) in enumerate(kv):
            self.cache.k[i, r, :, slot] = k[0].transpose(0, 1).to(self.cache.k.dtype)   # [M, Hkv, d]
            self.cache.v[i, r, :, slot] = v[0].transpose(0, 1).to(self.cache.v.dtype)

    def admit(self, reqs, prefill_aux):
        """prefill_aux ``[B, T, k*E]``: target layer outputs of prompt tokens ``0..n-2`` (the root is not prefilled)."""
        for r in reqs:
            self.ctx[r.row] = 0
        self._extend([r.row for r in reqs], [prefill_aux[i, :len(r.tokens) - 1] for i, r in enumerate(reqs)])

    def commit(self, reqs, path_aux, path_len):
        """path_aux ``[B, L, k*E]``: the accepted path (root first), ``path_len[b]`` entries of it."""
        self._extend([r.row for r in reqs], [path_aux[i, :int(path_len[i])] for i in range(len(reqs))])
        for r in reqs:
            if self.ctx[r.row] != len(r.tokens) - 1:
                raise RuntimeError(f"dflash drafter: request {r.request_id!r} has {self.ctx[r.row]} context "
                                   f"entries for {len(r.tokens) - 1} committed tokens")

    # -- one block -------------------------------------------------------------------------------
    def block(self, reqs) -> tuple[torch.Tensor, torch.Tensor]:
        """Run each request's block over its context: (roots int64 ``[B]``, hidden ``[B, block_size, E]``)."""
        dev, cfg = self.device, self.head.config
        B, T = len(reqs), cfg.block_size
        roots = torch.tensor([r.tokens[-1] for r in reqs], device=dev)
        n = torch.tensor([self.ctx[r.row] for r in reqs], device=dev)             # [B] context length = root position
        rows = torch.tensor([r.row for r in reqs], device=dev)
        W = int(n.max())
        ctx_k = [self.cache.k[i, rows, :, :W] for i in range(len(self.head.layers))]
        ctx_v = [self.cache.v[i, rows, :, :W] for i in range(len(self.head.layers))]
        visible = torch.arange(W, device=dev)[None] < n[:, None]                   # [B, W]
        tokens = torch.full((B, T), cfg.mask_token_id, dtype=torch.int64, device=dev)
        tokens[:, 0] = roots
        positions = n[:, None] + torch.arange(T, device=dev)[None]
        embeds = self.target.embed(tokens).to(self.head.fc.weight.dtype)
        return roots, self.head.block_hidden(embeds, positions, ctx_k, ctx_v, visible)

    def draft_tokens(self, reqs, roots, hidden, L: int, mode: DraftMode):
        """Drafts ``[B, L]`` and, when sampling, their distributions ``[B, L, V]``: DFlash's positions 1..L."""
        logits = self.target.logits(hidden[:, 1:L + 1])                            # [B, L, V]
        if not mode.sample:
            return logits.argmax(-1), None
        q = probs_per_request(logits, [r.sampling for r in reqs])                  # [B, L, V]
        return draw_per_request(q, 1, replacement=True, gens=list(mode.generators))[..., 0], q

    @torch.inference_mode()
    def propose(self, reqs, depths, branching, mode):
        if branching != 1:
            raise ValueError(f"drafter {self.name!r} proposes chains only; got branching {branching}")
        L = max(depths)
        if L == 0:
            return chain_proposal(torch.tensor([r.tokens[-1] for r in reqs], device=self.device))
        if L > self.max_draft_len:
            raise ValueError(f"drafter {self.name!r}: D={L} exceeds the {self.max_draft_len} drafts of its "
                             f"block (block_size {self.head.config.block_size})")
        roots, hidden = self.block(reqs)
        drafts, q = self.draft_tokens(reqs, roots, hidden, L, mode)
        B, dev = len(reqs), self.device
        node = torch.arange(L + 1, device=dev)
        return Proposal(torch.cat([roots[:, None], drafts], dim=1), (node - 1).expand(B, L + 1).contiguous(),
                        torch.tensor(depths, device=dev) + 1, node.expand(B, L + 1).contiguous(), q)
