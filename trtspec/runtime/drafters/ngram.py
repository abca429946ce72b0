"""``ngram``: model-free prompt lookup (Saxena 2023; TensorRT-LLM / vLLM ``ngram``).

Find the longest suffix of the committed text (``max_ngram`` down to ``min_ngram`` tokens) that
occurred earlier, most recent occurrence first, and propose the up to D tokens that followed it.
"""
from __future__ import annotations

import torch

from trtspec.runtime.drafters.base import Drafter, DraftMode, Proposal


def lookup(tokens: list[int], d: int, min_ngram: int = 1, max_ngram: int = 3) -> list[int]:
    """Up to ``d`` tokens following the latest earlier match of the longest suffix n-gram, or []."""
    if d <= 0:
        return []
    n_tok = len(tokens)
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        suffix = tokens[n_tok - n:]
        for start in range(n_tok - n - 1, -1, -1):          # latest occurrence strictly before the suffix
            if tokens[start:start + n] == suffix:
                return tokens[start + n: start + n + d]
    return []


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, device="cpu", min_ngram: int = 1, max_ngram: int = 3):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"ngram sizes must satisfy 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.device, self.min_ngram, self.max_ngram = torch.device(device), min_ngram, max_ngram

    def propose(self, reqs, depths, branching, mode: DraftMode):
        """A chain per request (ragged through ``num_nodes``); in sample mode ``draft_probs`` is one-hot
        at each draft (a deterministic draft: accepted with probability p(x), lossless)."""
        chains = [[r.tokens[-1]] + lookup(r.tokens, d, self.min_ngram, self.max_ngram) for r, d in zip(reqs, depths)]
        B, N = len(reqs), max(len(c) for c in chains)
        tokens = torch.zeros(B, N, dtype=torch.int64, device=self.device)
        for i, c in enumerate(chains):
            tokens[i, : len(c)] = torch.tensor(c, device=self.device)
        parents = (torch.arange(N, device=self.device) - 1).expand(B, N).contiguous()
        depth = torch.arange(N, device=self.device).expand(B, N).contiguous()
        num_nodes = torch.tensor([len(c) for c in chains], device=self.device)
        dprobs = None
        if mode.sample:
            V = reqs[0].vocab_size
            dprobs = torch.zeros(B, N - 1, V, device=self.device)   # row j: draft j = node j + 1
            for i, c in enumerate(chains):
                for j in range(len(c) - 1):
                    dprobs[i, j, c[j + 1]] = 1.0
        return Proposal(tokens, parents, num_nodes, depth, dprobs)
