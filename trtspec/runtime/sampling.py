"""Temperature / top-k / top-p, applied identically to target and draft logits, and each
request's random streams.

The verifiers are lossless with respect to the *transformed* target distribution, so both
sides must go through :func:`probs` with the same parameters.

Every random draw of a request comes from its own streams, keyed by ``(seed, step)``: its seed
(its SamplingParams.seed, or one derived from the engine's seed and its arrival index) and its
own step count. The drafter draws with a ``torch.Generator`` per request (:func:`generators`),
the verifiers with the counter-based uniforms of :func:`trtspec.reference.uniform`
(``offset = step``), so a request samples the same tokens at any batch position, alone or among
any neighbours (as vLLM's per-request generators).
"""
from __future__ import annotations

import torch

from trtspec.reference import MASK64, mix64

_DRAFT_STREAM = 0x5D5D_D5D5_0F0F_F0F0   # separates the drafter's stream from the verifier's


def probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """float32 ``[..., V]`` rows summing to 1 from logits ``[..., V]``.

    ``p = softmax(logits / T)`` restricted to the ``top_k`` largest logits (0 = all) and then to the
    smallest set of most likely tokens whose mass reaches ``top_p`` (1.0 = all), renormalised.
    ``temperature == 0`` gives the one-hot argmax (ties -> lowest id).
    """
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    p = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(p, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p      # mass of strictly more likely tokens
        drop_sorted = before >= top_p                              # keep while the mass before < top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        p = p.masked_fill(drop, 0.0)
        p = p / p.sum(-1, keepdim=True)
    return p


def draw(q: torch.Tensor, k: int, *, replacement: bool, generator: torch.Generator) -> torch.Tensor:
    """int64 ``[M, k]`` children drawn from rows ``q [M, V]``: i.i.d. (``replacement``) or
    without replacement by Gumbel-top-k (``argtop_k(log q + G)``, G ~ Gumbel(0, 1))."""
    if replacement:
        return torch.multinomial(q, k, replacement=True, generator=generator)
    u = torch.rand(q.shape, generator=generator, device=q.device).clamp_(1e-20, 1.0)
    gumbel = -torch.log(-torch.log(u))
    return torch.topk(torch.log(q) + gumbel, k, dim=-1).indices


def request_seed(engine_seed: int, index: int) -> int:
    """The 64-bit seed of the ``index``-th request added to an engine with seed ``engine_seed``,
    for a request that brings none of its own."""
    return mix64((engine_seed & MASK64) ^ mix64(index & MASK64))


def signed64(value: int) -> int:
    """The int64 holding the same 64 bits as ``value mod 2**64`` (for int64 tensors of seeds)."""
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def generators(streams, device) -> list[torch.Generator]:
    """One ``torch.Generator`` per ``(seed, step)`` stream: the drafter's draws for that request and step."""
    return [torch.Generator(device=device).manual_seed(mix64((seed & MASK64) ^ mix64(step ^ _DRAFT_STREAM)))
            for seed, step in streams]


def draw_per_request(q: torch.Tensor, k: int, *, replacement: bool, gens: list[torch.Generator]) -> torch.Tensor:
    """int64 ``[B, F, k]``: :func:`draw` of request b's rows ``q[b] [F, V]`` with its own generator."""
    return torch.stack([draw(q[b], k, replacement=replacement, generator=g) for b, g in enumerate(gens)])


def probs_per_request(logits: torch.Tensor, transforms: list[tuple[float, int, float]]) -> torch.Tensor:
    """:func:`probs` of ``logits [B, ..., V]`` with request b's ``(temperature, top_k, top_p)``; one call per distinct triple."""
    out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    for t in set(transforms):
        idx = torch.tensor([i for i, x in enumerate(transforms) if x == t], device=logits.device)
        out[idx] = probs(logits[idx], *t)
    return out
