"""``dspark``: DFlash's block forward plus DSpark's Markov head run left to right over the block.

Block position k (0 = the root) predicts the token after block token k, so a block of ``block_size`` gives
``block_size`` drafts. Draft ``k + 1`` is taken from ``softmax(U_k + B_k)`` where ``U_k`` are the backbone's
logits at position k and ``B_k = markov(d_k, h_k)`` is the Markov bias of the previous token (``d_0`` = the
root): its argmax when greedy, a draw with the request's generator when sampling -- so each draft's
distribution depends on the drafts before it, and that distribution is what the verifier receives.

The confidence head (when the export has one) gives, per drafted position, the probability that the draft
is accepted; :attr:`DSparkDrafter.last_confidence` holds them for the last proposal (``[B, L]``), and
``min_confidence`` (off by default) cuts a request's chain before the first draft whose confidence is below
it -- a shorter proposal, never a different verified output.
"""
from __future__ import annotations

import torch

from trtspec.runtime.drafters.base import DraftMode, Proposal
from trtspec.runtime.drafters.dflash import DFlashDrafter
from trtspec.runtime.sampling import draw_per_request, probs_per_request


class DSparkDrafter(DFlashDrafter):
    name = "dspark"

    def __init__(self, head, target, *, min_confidence: float | None = None):
        super().__init__(head, target)
        if min_confidence is not None:
            if not head.config.confidence_head:
                raise ValueError(f"{head.config.source}: min_confidence needs a confidence head "
                                 "(dflash_config.use_confidence_head is false)")
            if not 0.0 < min_confidence < 1.0:
                raise ValueError(f"min_confidence must be in (0, 1), got {min_confidence}")
        self.min_confidence = min_confidence
        self.last_confidence: torch.Tensor | None = None

    def draft_tokens(self, reqs, roots, hidden, L: int, mode: DraftMode):
        """Drafts ``[B, L]`` left to right: ``d_{k+1}`` from ``U_k + markov(d_k, h_k)``; with their distributions when sampling."""
        backbone = self.target.logits(hidden[:, :L])                               # [B, L, V]
        prev, state = roots, None
        drafts, qs, conf = [], [], []
        transforms = [r.sampling for r in reqs]
        for k in range(L):
            h = hidden[:, k]
            if self.head.config.confidence_head:
                conf.append(self.head.confidence(prev, h))
            bias, state = self.head.markov_step(prev, h, state)
            logits = backbone[:, k] + bias.float()                                  # [B, V]
            if mode.sample:
                q = probs_per_request(logits[:, None], transforms)                  # [B, 1, V]
                prev = draw_per_request(q, 1, replacement=True, gens=list(mode.generators))[:, 0, 0]
                qs.append(q[:, 0])
            else:
                prev = logits.argmax(-1)
            drafts.append(prev)
        self.last_confidence = torch.stack(conf, dim=1) if conf else None
        return torch.stack(drafts, dim=1), (torch.stack(qs, dim=1) if mode.sample else None)

    @torch.inference_mode()
    def propose(self, reqs, depths, branching, mode) -> Proposal:
        self.last_confidence = None
        prop = super().propose(reqs, depths, branching, mode)
        if self.min_confidence is None or self.last_confidence is None:
            return prop
        # cut each chain before its first draft under the threshold (at least one draft stays)
        low = self.last_confidence < self.min_confidence                           # [B, L]
        first = torch.where(low.any(1), low.float().argmax(1), torch.full_like(prop.num_nodes, low.shape[1]))
        keep = torch.minimum(prop.num_nodes - 1, first.clamp(min=1))
        prop.num_nodes = keep + 1
        return prop
