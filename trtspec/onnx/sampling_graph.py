"""Temperature / top-k / top-p inside the exported graphs, per request, as runtime inputs.

The same transform as :func:`trtspec.runtime.sampling.probs` (the verifiers are lossless with respect
to the *transformed* target distribution, so target and draft go through it with the same
parameters), written with exportable ops and one request's parameters per batch row::

    greedy (temperature == 0)  -> one-hot argmax (ties: lowest id)
    x = logits / temperature;  top-k: x < k-th largest x -> -inf (top_k 0 or >= V: off)
    p = softmax(x);  top-p: drop tokens whose strictly-more-likely mass is >= top_p, renormalise

The ordering top-k and top-p need comes from one TopK over the ``width`` largest logits. TensorRT's
TopK takes ``k <= 3840`` (https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/operators/TopK.html),
so for vocabularies above that ``width = 3840``: top-k is exact for ``top_k <= width`` (the loop and
the runtime config refuse larger values) and top-p is exact whenever its nucleus lies within the
``width`` most likely tokens (tokens past them are dropped when ``top_p < 1``).
"""
from __future__ import annotations

import torch

TOPK_LIMIT = 3840
"""Largest k of TensorRT's TopK layer (see the module docstring)."""


def sort_width(vocab_size: int) -> int:
    """Candidates the in-graph top-k / top-p order: the whole vocabulary up to :data:`TOPK_LIMIT`."""
    return min(vocab_size, TOPK_LIMIT)


def sampling_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   width: int) -> torch.Tensor:
    """float32 ``[B, N, V]`` rows summing to 1 from logits ``[B, N, V]`` and request b's
    ``temperature[b]`` (float32), ``top_k[b]`` (int64), ``top_p[b]`` (float32) (see the module docstring)."""
    logits = logits.float()
    B, N, V = logits.shape
    greedy = temperature <= 0                                                   # [B]
    t = torch.where(greedy, torch.ones_like(temperature), temperature)
    x = logits / t[:, None, None]
    vals, order = torch.topk(x, width, dim=-1)                                  # [B, N, W], descending
    use_k = (top_k > 0) & (top_k < V)
    kth_at = (torch.where(use_k, top_k, torch.ones_like(top_k)).clamp(max=width) - 1)[:, None, None]
    kth = torch.gather(vals, 2, kth_at.expand(B, N, 1))                         # [B, N, 1]
    x = torch.where(use_k[:, None, None] & (x < kth), torch.full_like(x, float("-inf")), x)
    p = torch.softmax(x, dim=-1)
    sorted_p = torch.gather(p, 2, order)                                        # p in descending order
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p                          # mass of strictly more likely
    keep_sorted = (before < top_p[:, None, None]).float()
    keep = torch.zeros_like(p).scatter(2, order, keep_sorted) > 0
    use_p = (top_p < 1.0)[:, None, None]
    nucleus = torch.where(keep, p, torch.zeros_like(p))
    p = torch.where(use_p, nucleus / nucleus.sum(-1, keepdim=True), p)
    onehot = (torch.arange(V)[None, None, :] == logits.argmax(-1, keepdim=True)).float()
    return torch.where(greedy[:, None, None], onehot, p)
