"""Draft-verification ops ``torch.ops.trtspec.*``: C++ on CPU, CUDA on GPU, fake kernels for tracing.

Each function here validates its arguments (a :class:`ValueError` naming the argument and what
was expected), then calls the op ``torch.ops.trtspec.<name>`` registered by ``trtspec._C``. The
semantics, bit for bit on CPU, are those of :mod:`trtspec.reference`, the specification; the
terms (tree, root, ``num_nodes``, accepted, bonus) are defined in its module docstring.

Papers:

* speculative sampling: Leviathan, Kalman, Matias, "Fast Inference from Transformers via
  Speculative Decoding", ICML 2023, https://arxiv.org/abs/2211.17192
* token trees: Miao et al., "SpecInfer", ASPLOS 2024, https://arxiv.org/abs/2305.09781
* recursive rejection sampling without replacement: Jeon et al., "Recursive Speculative
  Decoding", 2024, https://arxiv.org/abs/2402.14160
* block verification: Sun et al., "Block Verification Accelerates Speculative Decoding",
  ICLR 2025, https://arxiv.org/abs/2403.10444

Layout of the sampled verifiers
-------------------------------
:func:`verify_sample` and :func:`verify_block` take the same tensors for the same D drafts (a tree
adds ``parents``), so one drafter output feeds either::

    draft_tokens  int32/int64 [B, D]       draft j = tree node j + 1; the root (last committed token) is not passed
    target_probs  float32 [B, D + 1, V]    row i: the target after node i (row 0 after the root)
    draft_probs   float32 [B, D, V]        row j: the distribution draft j was drawn from
    draft_lens    int32/int64 [B] or None  request b uses drafts 0 .. draft_lens[b] - 1; the rest is padding
    seed, offset  int or int64 [B]         request b's random stream

Why this one: the draft-aligned rows are FlashInfer's ``chain_speculative_sampling``
(``draft_token_ids [B, n]``, ``draft_probs [B, n, V]``, ``target_probs [B, n + 1, V]``, int32 ids;
flashinfer-ai/flashinfer, flashinfer/sampling.py) and vLLM's rejection sampler (one draft row per
draft token, ragged by ``num_draft_tokens``, int32 ids, one ``torch.Generator`` per seeded request;
vllm-project/vllm, vllm/v1/sample/rejection_sampler.py and vllm/v1/spec_decode/metadata.py). No row
is allocated only to go unread, and a per-draft row also describes a tree whose siblings came from
different distributions (SpecInfer's several drafters). SGLang's tree sampler
(``tree_speculative_sampling_target_only``, sgl-project/sglang, sgl-kernel/python/sgl_kernel/speculative.py)
indexes by node with the root included (``candidates [bs, N]``, ``draft_probs [bs, N, V]`` read at
the parent): there ``draft_tokens = candidates[:, 1:]`` and ``draft_probs = its_rows[b, parents[b, 1:]]``.
Ragged batches are padded to ``[B, D]`` with ``draft_lens`` (vLLM flattens them) so every tensor has
a static shape for TensorRT engines and CUDA graphs.

Random streams are per request: request b's uniforms are a function of ``(seed[b], offset[b])``
and its own drafts only (see :func:`trtspec.reference.uniform`), never of its batch position or
its neighbours; Python ints broadcast to every request.

The C++ bindings repeat the structural checks (shapes, dtypes, devices, contiguity, tree,
token ids, values read), so direct ``torch.ops.trtspec.*`` calls are safe too; they raise
:class:`RuntimeError` with the op's name and the kernel's status.
"""
from __future__ import annotations

import operator

import torch

from trtspec import _C  # noqa: F401  (loading the library registers torch.ops.trtspec.*)

MAX_BATCH = 1 << 20
"""Largest batch ``B`` (``trtspec::kMaxBatch``)."""
MAX_NODES = 4096
"""Largest tree ``N`` including the root, and the bound on ``max_depth + 1`` (``trtspec::kMaxNodes``)."""
MAX_BLOCK_DRAFT = 1024
"""Largest chain ``D`` for :func:`verify_block` (``trtspec::kMaxBlockDraft``)."""
ROW_SUM_TOLERANCE = 1e-3
"""A probability row is accepted when ``|sum(row) - 1| <= ROW_SUM_TOLERANCE`` (the sum's rounding
error, below 1e-7 for V up to 2**20 even in float32, is four orders of magnitude smaller)."""

_MASK64 = (1 << 64) - 1
_INT32_MAX = (1 << 31) - 1
_INDEX_DTYPES = (torch.int32, torch.int64)


# ---------------------------------------------------------------------------------------------
# validation helpers (each raises ValueError naming the argument)
# ---------------------------------------------------------------------------------------------
def _tensor(name: str, t, dims: int, dtypes: tuple, layout: str, device: torch.device | None = None):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if t.dim() != dims:
        raise ValueError(f"{name} must have {dims} dimensions {layout}, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise ValueError(f"{name} must have dtype {names}, got {str(t.dtype).replace('torch.', '')}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device} like the other inputs, got {t.device}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name} must be on a CPU or CUDA device, got {t.device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous())")
    return t


def _shape(name: str, t: torch.Tensor, expected: tuple, layout: str) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)} {layout}, got {tuple(t.shape)}")


def _first(mask: torch.Tensor) -> list[int]:
    return mask.nonzero()[0].tolist()


def _u64(name: str, value) -> int:
    """A Python int as the signed int64 holding the same 64 bits as ``value mod 2**64``."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}") from None
    v &= _MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def _max_depth(max_depth, N: int) -> int:
    if max_depth is None:
        return N - 1
    if isinstance(max_depth, bool) or not isinstance(max_depth, int):
        raise ValueError(f"max_depth must be an int or None, got {type(max_depth).__name__}")
    if not 0 <= max_depth < MAX_NODES:
        raise ValueError(f"max_depth must be in [0, {MAX_NODES - 1}], got {max_depth}")
    return max_depth


def _check_tree(parents, num_nodes, max_depth, device=None):
    """Validate ``parents [B, N]`` / ``num_nodes [B]``; return (parents int32, num_nodes int32 | None,
    valid [B, N] bool, max_depth int)."""
    parents = _tensor("parents", parents, 2, _INDEX_DTYPES, "[B, N]", device)
    B, N = parents.shape
    if B > MAX_BATCH:
        raise ValueError(f"parents.shape[0] (B) must be <= {MAX_BATCH}, got {B}")
    if not 1 <= N <= MAX_NODES:
        raise ValueError(f"parents.shape[1] (N, nodes per tree including the root) must be in [1, {MAX_NODES}], got {N}")
    depth_bound = _max_depth(max_depth, N)
    idx = torch.arange(N, device=parents.device)
    if num_nodes is not None:
        num_nodes = _tensor("num_nodes", num_nodes, 1, _INDEX_DTYPES, "[B]", parents.device)
        _shape("num_nodes", num_nodes, (B,), "[B]")
        bad = (num_nodes < 1) | (num_nodes > N)
        if bool(bad.any()):
            (b,) = _first(bad)
            raise ValueError(f"num_nodes[{b}] must be in [1, N={N}], got {int(num_nodes[b])}")
        valid = idx[None, :] < num_nodes[:, None].long()
        num_nodes = num_nodes.to(torch.int32)
    else:
        valid = torch.ones(B, N, dtype=torch.bool, device=parents.device)
    p = parents.long()
    if B and bool((p[:, 0] != -1).any()):
        (b,) = _first(p[:, 0] != -1)
        raise ValueError(f"parents[{b}, 0] must be -1 (node 0 is the root), got {int(p[b, 0])}")
    child = valid & (idx > 0)
    bad = child & ((p < 0) | (p >= idx))
    if bool(bad.any()):
        b, i = _first(bad)
        raise ValueError(f"parents[{b}, {i}] must be in [0, {i}) (a parent precedes its child), got {int(p[b, i])}")
    # depth by pointer doubling: jump = 2^k-th ancestor (the root is a fixed point of depth 0)
    jump = torch.where(child, p, 0)
    depth = child.long()
    hops = 1
    while hops < N:
        depth = depth + torch.gather(depth, 1, jump)
        jump = torch.gather(jump, 1, jump)
        hops *= 2
    if B and int(depth.max()) > depth_bound:
        b = int(depth.max(1).values.argmax())
        raise ValueError(
            f"parents: the tree of request {b} has depth {int(depth[b].max())}, deeper than max_depth={depth_bound}"
        )
    return parents.to(torch.int32), num_nodes, valid, depth_bound


def _check_tokens(name: str, tokens: torch.Tensor, vocab: int, mask: torch.Tensor) -> None:
    bad = mask & ((tokens < 0) | (tokens >= vocab))
    if bool(bad.any()):
        b, i = _first(bad)
        raise ValueError(f"{name}[{b}, {i}] must be a token id in [0, V={vocab}), got {int(tokens[b, i])}")


def _check_probs(name: str, probs: torch.Tensor, rows: torch.Tensor | None) -> None:
    """Rows ``probs[b, i]`` (where ``rows[b, i]``) must be finite, >= 0 and sum to 1 within tolerance."""
    if probs.device.type == "cpu":  # one C++ pass: the row's float64 sum, NaN where an entry is invalid
        total = torch.ops.trtspec._row_sums(probs, rows)
        bad = torch.isnan(total)
    else:
        total = probs.sum(-1)  # NaN/Inf show up in the sum; its rounding is far below the tolerance
        keep = torch.ones_like(total, dtype=torch.bool) if rows is None else rows
        bad = keep & (~torch.isfinite(total) | ~(probs.amin(-1) >= 0))
        total = torch.where(keep, total.double(), 1.0)
    if bool(bad.any()):
        b, i = _first(bad)
        raise ValueError(f"{name}[{b}, {i}] has a NaN, Inf or negative entry; probabilities must be finite and >= 0")
    off = (total - 1.0).abs() > ROW_SUM_TOLERANCE
    if bool(off.any()):
        b, i = _first(off)
        raise ValueError(
            f"{name}[{b}, {i}] sums to {float(total[b, i]):.6g}; each row must sum to 1 within {ROW_SUM_TOLERANCE}"
        )


# ---------------------------------------------------------------------------------------------
# the ops
# ---------------------------------------------------------------------------------------------
def tree_metadata(parents: torch.Tensor, num_nodes: torch.Tensor | None = None):
    """Packed ancestor mask, depth and child lists of a batch of token trees (SpecInfer, Miao et al. 2024).

    Parameters
    ----------
    parents : torch.Tensor
        int32 or int64 ``[B, N]``: ``parents[b, 0] == -1`` and ``0 <= parents[b, i] < i``;
        ``1 <= N <= MAX_NODES``.
    num_nodes : torch.Tensor, optional
        int32 or int64 ``[B]``, ``1 <= num_nodes[b] <= N``; rows past it are ignored on input and
        written as 0 (mask, depth) / -1 (child lists). Default: N for every request.

    Returns
    -------
    packed_mask : torch.Tensor
        int32 ``[B, N, ceil(N/32)]``: bit ``j`` of word ``w`` of row ``i`` is set iff node
        ``32*w + j`` is ``i`` or an ancestor of ``i`` (least-significant bit first; TensorRT-LLM's
        spec-decoding layout).
    depth : torch.Tensor
        int32 ``[B, N]``, 0 at the root.
    first_child, next_sibling : torch.Tensor
        int32 ``[B, N]``: the smallest-index child of ``i`` / the next larger-index child of
        ``i``'s parent, -1 where none.
    """
    parents, num_nodes, _, _ = _check_tree(parents, num_nodes, None)
    return torch.ops.trtspec.tree_metadata(parents, num_nodes)


def verify_greedy(tokens, parents, target_logits, num_nodes=None, max_depth=None):
    """Greedy tree verification: follow the target's argmax from the root down the draft tree.

    At node ``u``, ``t = argmax(target_logits[b, u])`` (ties -> lowest id; a NaN counts as the
    maximum, as ``torch.argmax``); the first child of ``u`` whose token is ``t`` is accepted and
    the walk goes on; otherwise it stops and the bonus token is ``t``. Only the logits rows of
    visited nodes are read. For a chain this is greedy speculative decoding (Leviathan et al.
    2023); for trees, SpecInfer (Miao et al. 2024).

    Parameters
    ----------
    tokens : torch.Tensor
        int64 ``[B, N]``, the token of each node; ids of nodes ``1..num_nodes[b]-1`` in ``[0, V)``.
    parents : torch.Tensor
        int32 or int64 ``[B, N]``, see :func:`tree_metadata`.
    target_logits : torch.Tensor
        float32, float16 or bfloat16 ``[B, N, V]``: the target's logits after each node.
    num_nodes : torch.Tensor, optional
        int32 or int64 ``[B]``, see :func:`tree_metadata`.
    max_depth : int, optional
        Static bound on the tree depth, ``0 <= max_depth < MAX_NODES``; default ``N - 1``.

    Returns
    -------
    accepted_len : torch.Tensor
        int32 ``[B]``: draft tokens accepted (the bonus excluded; AL = accepted_len + 1).
    accepted_nodes : torch.Tensor
        int32 ``[B, max_depth + 1]``: the accepted path, root first, -1 padded.
    bonus_token : torch.Tensor
        int64 ``[B]``.
    """
    device = parents.device if isinstance(parents, torch.Tensor) else None
    parents, num_nodes, valid, depth = _check_tree(parents, num_nodes, max_depth, device)
    B, N = parents.shape
    tokens = _tensor("tokens", tokens, 2, (torch.int64,), "[B, N]", device)
    _shape("tokens", tokens, (B, N), "[B, N]")
    target_logits = _tensor("target_logits", target_logits, 3, (torch.float32, torch.float16, torch.bfloat16),
                            "[B, N, V]", device)
    if target_logits.shape[:2] != (B, N) or target_logits.shape[2] < 1:
        raise ValueError(f"target_logits must have shape ({B}, {N}, V) [B, N, V] with V >= 1, "
                         f"got {tuple(target_logits.shape)}")
    _check_tokens("tokens", tokens, target_logits.shape[2], valid & (torch.arange(N, device=device) > 0))
    return torch.ops.trtspec.verify_greedy(tokens, parents, target_logits, num_nodes, depth)


def _streams(name: str, value, B: int, device) -> torch.Tensor:
    """seed / offset: an int (every request) or an int64 ``[B]`` tensor -> int64 ``[B]`` on ``device``."""
    if isinstance(value, torch.Tensor):
        t = _tensor(name, value, 1, (torch.int64,), "[B]", device)
        _shape(name, t, (B,), "[B]")
        return t
    return torch.full((B,), _u64(name, value), dtype=torch.int64, device=device)


def _check_draft_lens(draft_lens, B: int, D: int, device) -> torch.Tensor | None:
    if draft_lens is None:
        return None
    draft_lens = _tensor("draft_lens", draft_lens, 1, _INDEX_DTYPES, "[B]", device)
    _shape("draft_lens", draft_lens, (B,), "[B]")
    bad = (draft_lens < 0) | (draft_lens > D)
    if bool(bad.any()):
        (b,) = _first(bad)
        raise ValueError(f"draft_lens[{b}] must be in [0, D={D}], got {int(draft_lens[b])}")
    return draft_lens.to(torch.int32)


def _check_sampled(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, max_draft: int):
    """The checks verify_sample and verify_block share (one layout); returns the checked tensors and
    ``used [B, D+1]``: the nodes each request uses (root included)."""
    device = draft_tokens.device if isinstance(draft_tokens, torch.Tensor) else None
    draft_tokens = _tensor("draft_tokens", draft_tokens, 2, _INDEX_DTYPES, "[B, D]", device)
    B, D = draft_tokens.shape
    if B > MAX_BATCH:
        raise ValueError(f"draft_tokens.shape[0] (B) must be <= {MAX_BATCH}, got {B}")
    if D > max_draft:
        raise ValueError(f"draft_tokens.shape[1] (D) must be <= {max_draft}, got {D}")
    target_probs = _tensor("target_probs", target_probs, 3, (torch.float32,), "[B, D + 1, V]", device)
    if target_probs.shape[:2] != (B, D + 1) or target_probs.shape[2] < 1:
        raise ValueError(f"target_probs must have shape ({B}, {D + 1}, V) [B, D + 1, V] with V >= 1, "
                         f"got {tuple(target_probs.shape)}")
    V = target_probs.shape[2]
    draft_probs = _tensor("draft_probs", draft_probs, 3, (torch.float32,), "[B, D, V]", device)
    _shape("draft_probs", draft_probs, (B, D, V), "[B, D, V]")
    seed, offset = _streams("seed", seed, B, device), _streams("offset", offset, B, device)
    draft_lens = _check_draft_lens(draft_lens, B, D, device)
    idx = torch.arange(D + 1, device=device)
    used = torch.ones(B, D + 1, dtype=torch.bool, device=device) if draft_lens is None else (
        idx[None, :] <= draft_lens[:, None].long())
    _check_tokens("draft_tokens", draft_tokens, V, used[:, 1:])
    return draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, used


def verify_sample(draft_tokens, parents, target_probs, draft_probs, seed, offset, siblings_without_replacement=False,
                  draft_lens=None, max_depth=None, *, validate=True):
    """Lossless tree verification by multi-draft recursive rejection sampling.

    Child ``c`` of node ``u`` carries draft ``x = draft_tokens[b, c-1]`` drawn from
    ``q = draft_probs[b, c-1]``; the children are tried in index order, ``x`` accepted with
    probability ``min(1, p(x)/q(x))`` (``p = target_probs[b, u]``); after a rejection
    ``p <- normalize(max(p - q, 0))``. When every child is rejected, or at a leaf, the bonus token
    is sampled from the current ``p`` (from the target row if rounding emptied the residual). For a
    chain this is speculative sampling (Leviathan et al. 2023, https://arxiv.org/abs/2211.17192);
    for trees SpecInfer's multi-step verification (Miao et al. 2024), where siblings drawn i.i.d.
    from one distribution carry the same row and a sibling from another drafter its own. With
    ``siblings_without_replacement`` (children drawn without replacement, e.g. Gumbel-top-k, from
    the row of the first child; later siblings' rows are not read) the tried token is also removed
    from ``q`` and ``q`` renormalised (Jeon et al. 2024, https://arxiv.org/abs/2402.14160): still
    lossless. Deterministic per request: the test of node ``c`` of request ``b`` uses the uniform
    :func:`trtspec.reference.uniform` ``(seed[b], offset[b], c, 0)``, the bonus drawn at node ``u``
    ``uniform(seed[b], offset[b], u, 1)``; :func:`verify_block` draws the same ones on a chain.

    Layout: the sampled verifiers' one layout (module docstring), plus the tree.

    Parameters
    ----------
    draft_tokens : torch.Tensor
        int32 or int64 ``[B, D]``, ``D + 1 <= MAX_NODES``: draft ``j`` is tree node ``j + 1``; ids
        of the ``draft_lens[b]`` used drafts in ``[0, V)``.
    parents : torch.Tensor
        int32 or int64 ``[B, D + 1]``, the tree over the root and the drafts (see
        :func:`tree_metadata`); nodes past ``draft_lens[b]`` are padding.
    target_probs : torch.Tensor
        float32 ``[B, D + 1, V]``: the target's next-token distribution after each node; rows of
        the used nodes finite, >= 0, summing to 1 within ``ROW_SUM_TOLERANCE``.
    draft_probs : torch.Tensor
        float32 ``[B, D, V]``: the distribution each draft was drawn from; same conditions on the
        rows read (every used draft; only first children with ``siblings_without_replacement``).
    seed, offset : int or torch.Tensor
        Request b's random stream: ints (taken modulo 2**64, the same for every request) or int64
        ``[B]`` tensors (their 64 bits, unsigned) on the inputs' device.
    siblings_without_replacement : bool, default False
        Children of a node were drawn without replacement.
    draft_lens : torch.Tensor, optional
        int32 or int64 ``[B]``, ``0 <= draft_lens[b] <= D``: request b uses nodes
        ``0 .. draft_lens[b]``. Default: D for every request.
    max_depth : int, optional
        Static bound on the tree depth; default ``D``.
    validate : bool, default True
        Check every probability row read (one pass over each tensor). With False only the values
        the kernel reads are checked (by the kernel, RuntimeError on a NaN/Inf/negative entry).

    Returns
    -------
    accepted_len : torch.Tensor
        int32 ``[B]``, draft tokens accepted (bonus excluded).
    accepted_nodes : torch.Tensor
        int32 ``[B, max_depth + 1]``, node ids of the accepted path, root first, -1 padded.
    bonus_token : torch.Tensor
        int64 ``[B]``.
    """
    draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, used = _check_sampled(
        draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, MAX_NODES - 1)
    B, D = draft_tokens.shape
    device = draft_tokens.device
    parents = _tensor("parents", parents, 2, _INDEX_DTYPES, "[B, D + 1]", device)
    _shape("parents", parents, (B, D + 1), "[B, D + 1]")
    parents, _, _, depth = _check_tree(parents, None if draft_lens is None else draft_lens + 1, max_depth, device)
    if not isinstance(siblings_without_replacement, bool):
        raise ValueError(f"siblings_without_replacement must be a bool, got {type(siblings_without_replacement).__name__}")
    if validate:
        _check_probs("target_probs", target_probs, used)
        read = used[:, 1:].contiguous()
        if siblings_without_replacement and D:  # only a first child's row is read
            idx = torch.arange(1, D + 1, device=device).expand(B, D)
            par = parents[:, 1:].long().clamp(min=0)
            first = torch.full((B, D + 1), D + 1, dtype=torch.int64, device=device)
            first.scatter_reduce_(1, torch.where(read, par, D), torch.where(read, idx, D + 1), "amin")
            read = read & (first.gather(1, par) == idx)
        _check_probs("draft_probs", draft_probs, read)
    return torch.ops.trtspec.verify_sample(draft_tokens, parents, target_probs, draft_probs, seed, offset,
                                           siblings_without_replacement, draft_lens, depth)


def verify_block(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens=None, *, validate=True):
    """Block verification of a chain of drafts (Sun et al., ICLR 2025, https://arxiv.org/abs/2403.10444).

    Lossless, and never fewer accepted tokens in expectation than token-wise speculative
    sampling (Leviathan et al. 2023) on the same drafts: instead of stopping at the first
    rejected token it keeps a running weight ``w_i = min(1, w_{i-1} p(X_i)/q(X_i))`` and accepts
    the longest prefix ``tau`` whose test ``eta_i <= h_i`` passes, then samples the bonus from the
    residual ``max(w_tau p_tau - q_tau, 0)`` (or from ``p_d`` when all ``d = draft_lens[b]`` are
    accepted). See :func:`trtspec.reference.verify_block` for the maths. Uniforms of request b:
    ``eta_i = uniform(seed[b], offset[b], i, 0)``, the bonus ``uniform(seed[b], offset[b], tau, 1)``.
    Ragged batches, as vLLM's block verifier takes them: request b verifies its first
    ``draft_lens[b]`` drafts, exactly as it would alone.

    Layout: the sampled verifiers' one layout (module docstring), the same tensors as
    :func:`verify_sample` on a chain.

    Parameters
    ----------
    draft_tokens : torch.Tensor
        int32 or int64 ``[B, D]``, ``0 <= D <= MAX_BLOCK_DRAFT``; ids of the used drafts in ``[0, V)``.
    target_probs : torch.Tensor
        float32 ``[B, D + 1, V]``: the target after 0..D drafts; rows ``0..draft_lens[b]`` finite,
        >= 0, summing to 1 within ``ROW_SUM_TOLERANCE``.
    draft_probs : torch.Tensor
        float32 ``[B, D, V]``: the distributions the drafts were drawn from; same conditions on
        rows ``0..draft_lens[b]-1``.
    seed, offset : int or torch.Tensor
        Request b's random stream, as in :func:`verify_sample`.
    draft_lens : torch.Tensor, optional
        int32 or int64 ``[B]``, ``0 <= draft_lens[b] <= D``; default D for every request.
    validate : bool, default True
        Check every probability row read; with False only the values the kernel reads are checked.

    Returns
    -------
    accepted_len : torch.Tensor
        int32 ``[B]``, ``tau``: draft tokens accepted (bonus excluded).
    bonus_token : torch.Tensor
        int64 ``[B]``.
    """
    draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, used = _check_sampled(
        draft_tokens, target_probs, draft_probs, seed, offset, draft_lens, MAX_BLOCK_DRAFT)
    if validate:
        _check_probs("target_probs", target_probs, used)
        _check_probs("draft_probs", draft_probs, used[:, 1:].contiguous())
    return torch.ops.trtspec.verify_block(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens)


def accepted_kv_indices(accepted_nodes, accepted_len, cache_lens):
    """Source and destination KV-cache positions that compact each accepted path into contiguous slots.

    The step appended the tree's ``N`` tokens at ``cache_lens[b] .. cache_lens[b] + N - 1`` (node
    ``i`` at ``cache_lens[b] + i``); the accepted path (root first) must end up at
    ``cache_lens[b] + 0 .. accepted_len[b]``. The bonus token is not in the cache yet.

    Parameters
    ----------
    accepted_nodes : torch.Tensor
        int32 or int64 ``[B, L]`` (``L = max_depth + 1``, ``1 <= L <= MAX_NODES``), as returned by
        :func:`verify_greedy` / :func:`verify_sample`; entries ``0..accepted_len[b]`` >= 0.
    accepted_len : torch.Tensor
        int32 or int64 ``[B]``, in ``[0, L - 1]``.
    cache_lens : torch.Tensor
        int32 or int64 ``[B]``, >= 0, with every resulting position < 2**31.

    Returns
    -------
    src, dst : torch.Tensor
        int32 ``[B, L]``: ``cache_lens[b] + accepted_nodes[b, i]`` and ``cache_lens[b] + i`` for
        ``i <= accepted_len[b]``, -1 after.
    new_cache_lens : torch.Tensor
        int32 ``[B]``: ``cache_lens[b] + accepted_len[b] + 1``.
    """
    device = accepted_nodes.device if isinstance(accepted_nodes, torch.Tensor) else None
    accepted_nodes = _tensor("accepted_nodes", accepted_nodes, 2, _INDEX_DTYPES, "[B, L]", device)
    B, L = accepted_nodes.shape
    if B > MAX_BATCH:
        raise ValueError(f"accepted_nodes.shape[0] (B) must be <= {MAX_BATCH}, got {B}")
    if not 1 <= L <= MAX_NODES:
        raise ValueError(f"accepted_nodes.shape[1] (L = max_depth + 1) must be in [1, {MAX_NODES}], got {L}")
    accepted_len = _tensor("accepted_len", accepted_len, 1, _INDEX_DTYPES, "[B]", device)
    _shape("accepted_len", accepted_len, (B,), "[B]")
    cache_lens = _tensor("cache_lens", cache_lens, 1, _INDEX_DTYPES, "[B]", device)
    _shape("cache_lens", cache_lens, (B,), "[B]")
    bad = (accepted_len < 0) | (accepted_len >= L)
    if bool(bad.any()):
        (b,) = _first(bad)
        raise ValueError(f"accepted_len[{b}] must be in [0, L-1={L - 1}], got {int(accepted_len[b])}")
    base = cache_lens.long()
    bad = (base < 0) | (base + accepted_len.long() + 1 > _INT32_MAX)
    if bool(bad.any()):
        (b,) = _first(bad)
        raise ValueError(f"cache_lens[{b}] must be >= 0 with cache_lens + accepted_len + 1 < 2**31, "
                         f"got {int(cache_lens[b])}")
    on_path = torch.arange(L, device=device)[None, :] <= accepted_len.long()[:, None]
    nodes = accepted_nodes.long()
    bad = on_path & ((nodes < 0) | (base[:, None] + nodes > _INT32_MAX))
    if bool(bad.any()):
        b, i = _first(bad)
        raise ValueError(f"accepted_nodes[{b}, {i}] must be >= 0 (and cache_lens + node < 2**31) for "
                         f"i <= accepted_len[{b}], got {int(accepted_nodes[b, i])}")
    return torch.ops.trtspec.accepted_kv_indices(accepted_nodes.to(torch.int32), accepted_len.to(torch.int32),
                                                 cache_lens.to(torch.int32))


# ---------------------------------------------------------------------------------------------
# fake (meta) implementations: output shapes and dtypes only, for torch.compile / export
# ---------------------------------------------------------------------------------------------
@torch.library.register_fake("trtspec::tree_metadata")
def _tree_metadata_fake(parents, num_nodes=None):
    B, N = parents.shape
    return (parents.new_empty((B, N, (N + 31) // 32), dtype=torch.int32),
            parents.new_empty((B, N), dtype=torch.int32),
            parents.new_empty((B, N), dtype=torch.int32),
            parents.new_empty((B, N), dtype=torch.int32))


def _verify_outputs(parents, max_depth):
    B, N = parents.shape
    L = (N - 1 if max_depth is None else max_depth) + 1
    return (parents.new_empty((B,), dtype=torch.int32),
            parents.new_empty((B, L), dtype=torch.int32),
            parents.new_empty((B,), dtype=torch.int64))


@torch.library.register_fake("trtspec::verify_greedy")
def _verify_greedy_fake(tokens, parents, target_logits, num_nodes=None, max_depth=None):
    return _verify_outputs(parents, max_depth)


@torch.library.register_fake("trtspec::verify_sample")
def _verify_sample_fake(draft_tokens, parents, target_probs, draft_probs, seed, offset,
                        siblings_without_replacement=False, draft_lens=None, max_depth=None):
    return _verify_outputs(parents, max_depth)


@torch.library.register_fake("trtspec::verify_block")
def _verify_block_fake(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens=None):
    B = draft_tokens.shape[0]
    return draft_tokens.new_empty((B,), dtype=torch.int32), draft_tokens.new_empty((B,), dtype=torch.int64)


@torch.library.register_fake("trtspec::_row_sums")
def _row_sums_fake(probs, rows=None):
    return probs.new_empty(probs.shape[:2], dtype=torch.float64)


@torch.library.register_fake("trtspec::accepted_kv_indices")
def _accepted_kv_indices_fake(accepted_nodes, accepted_len, cache_lens):
    B, L = accepted_nodes.shape
    return (accepted_nodes.new_empty((B, L), dtype=torch.int32),
            accepted_nodes.new_empty((B, L), dtype=torch.int32),
            accepted_nodes.new_empty((B,), dtype=torch.int32))
