"""Positions, cache slots and attention masks for a block of new tokens (pure functions).

A block of T new tokens per request attends to a committed *prefix* of its cache row (slots
``0 .. prefix_len-1``) plus a *window* of slots written in this block or earlier in the step
(``prefix_len .. prefix_len+W-1``), as ``visible[b, t, w]`` says. A chain is a lower-triangular
``visible``; a tree is its ancestor matrix (a node sees itself and its ancestors).
Padding tokens (``valid = False``) write to the last slot of the row (scratch) and read slot 0,
so no row of the mask is empty.
"""
from __future__ import annotations

import torch


def unpack_mask(packed: torch.Tensor, n: int) -> torch.Tensor:
    """bool ``[B, N, n]`` from the packed int32 mask ``[B, N, ceil(N/32)]`` (bit j%32 of word j//32)."""
    j = torch.arange(n, device=packed.device)
    words = packed[..., j // 32]                      # [B, N, n]
    return ((words >> (j % 32)) & 1).bool()


def causal(T: int, device=None) -> torch.Tensor:
    """bool ``[1, T, T]`` lower-triangular (a chain)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()[None]


def block_inputs(prefix_len, visible, valid, slots, positions, cache_slots: int):
    """Write indices and the attention mask for a block.

    Args:
        prefix_len: int64 ``[B]``; visible: bool ``[B or 1, T, W]``; valid: bool ``[B, T]``;
        slots: int64 ``[B, T]`` where each valid token is written; positions: int64 ``[B, T]``;
        cache_slots: S, slots per cache row (slot S-1 is scratch for padding).

    Returns: (positions ``[B, T]``, write_idx ``[B, T]``, mask bool ``[B, T, S']``) with
    ``S' = max(prefix_len + W)``: ``mask[b, t, j] = j < prefix_len[b] or visible[b, t, j - prefix_len[b]]``.
    """
    B, T = valid.shape
    W = visible.shape[-1]
    width = int((prefix_len + W).max()) if B else 0
    j = torch.arange(width, device=prefix_len.device)[None, None, :]          # [1, 1, S']
    rel = j - prefix_len[:, None, None]                                        # [B, 1, S']
    in_window = (rel >= 0) & (rel < W)
    vis = visible.expand(B, T, W)
    window = torch.gather(vis, 2, rel.clamp(0, W - 1).expand(B, T, width)) & in_window
    mask = (rel < 0) | window
    pad = ~valid
    mask = torch.where(pad[..., None], j == 0, mask)
    write_idx = torch.where(pad, torch.full_like(slots, cache_slots - 1), slots)
    positions = torch.where(pad, torch.zeros_like(positions), positions)
    return positions, write_idx, mask


def chain_block(lens, counts, T: int, cache_slots: int, pos_offset=None):
    """Inputs for ``counts[b]`` consecutive tokens appended at slot ``lens[b]`` (prefill / catch-up).
    Position of token t = ``lens[b] + t`` (+ ``pos_offset``)."""
    t = torch.arange(T, device=lens.device)[None]
    slots = lens[:, None] + t
    valid = t < counts[:, None]
    pos = slots if pos_offset is None else slots + pos_offset[:, None]
    return block_inputs(lens, causal(T, lens.device), valid, slots, pos, cache_slots)
