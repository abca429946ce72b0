"""Pure-torch reference of every trtspec op: the specification the C++/CUDA kernels must match.

Readable first, fast never. Every function here has the same signature and returns the same
tensors as its op in :mod:`trtspec.ops`; the tests compare them element for element.

Terms (see the project design notes):

* A **tree** of ``N`` nodes per request is given by ``parents[b, i]``: ``parents[b, 0] == -1``
  (node 0, the *root*, is the last committed token) and ``0 <= parents[b, i] < i`` otherwise, so
  nodes are in topological order. A chain of D drafts is ``parents = [-1, 0, 1, ..., D-1]``.
* ``num_nodes[b]`` (optional) says request ``b`` uses only nodes ``0 .. num_nodes[b]-1``; the rest
  are padding, ignored on input and written as zeros / ``-1`` on output.
* ``tokens[b, i]`` is the token of node ``i`` (verify_greedy); ``tokens[b, 0]`` (the root) is not
  verified.
* ``target_*[b, i]`` is the target's next-token distribution *after* node ``i`` (its logits or
  probabilities), so the verdict on a child ``c`` of ``u`` reads row ``u``.
* **accepted** draft tokens exclude the *bonus* token (the target's own token emitted at the end
  of every step), so acceptance length ``AL = accepted_len + 1``.

The two sampled verifiers (verify_sample, verify_block) share one layout, documented in
:func:`trtspec.ops.verify_sample`: ``draft_tokens[b, j]`` is draft ``j`` = tree node ``j + 1`` (the
root is not passed), ``target_probs[b, i]`` the target after node ``i`` (D + 1 rows),
``draft_probs[b, j]`` the distribution draft ``j`` was drawn from (D rows), and ``draft_lens[b]``
the drafts request ``b`` uses (the rest is padding, never read).

Randomness is counter based (:func:`uniform`) and per request: the test of node ``i`` (draft
``i - 1``) of request ``b`` uses ``uniform(seed[b], offset[b], i, 0)`` and a bonus drawn at node ``i``
``uniform(seed[b], offset[b], i, 1)``, pure functions of the request's own stream and its own tree,
never of its batch index or its neighbours. So the C++ kernels reproduce the reference bit for
bit, a step is reproducible from ``(seed[b], offset[b])`` alone, a request gives the same verdict at
every batch position, and both sampled verifiers draw the same uniforms on the same chain.
"""
from __future__ import annotations

import torch

MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------------------------------------
# Counter-based uniform random numbers (shared bit for bit with cpp/include/trtspec/random.h)
# ---------------------------------------------------------------------------------------------
def mix64(z: int) -> int:
    """SplitMix64 finaliser (Steele et al. 2014): a bijective avalanche of a 64-bit word."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(seed: int, offset: int, node: int, j: int) -> float:
    """Draw ``j`` at node (chain position) ``node`` of the random stream ``(seed, offset)``: a float64
    uniform in [0, 1) with 53 random bits. The verifiers use ``j = 0`` to test a node, ``j = 1`` for
    the bonus drawn at it.

    ``u = (mix(seed ^ mix(offset ^ mix(node ^ mix(j)))) >> 11) * 2**-53``, all words unsigned 64-bit.
    """
    z = mix64((seed & MASK64) ^ mix64((offset & MASK64) ^ mix64((node & MASK64) ^ mix64(j & MASK64))))
    return (z >> 11) * (1.0 / (1 << 53))


def _word(stream, b: int) -> int:
    """Request b's seed or offset: an int (the same for every request) or entry b of a ``[B]`` tensor."""
    return (int(stream[b]) if isinstance(stream, torch.Tensor) else int(stream)) & MASK64


def _sample(weights: torch.Tensor, u: float, fallback: torch.Tensor | None = None) -> int:
    """Inverse-CDF sample from unnormalised non-negative ``weights[V]`` (float32) with uniform u.

    The CDF is a sequential float64 prefix sum; the sample is the first index whose prefix sum
    exceeds ``u * total``. If rounding leaves none, it is the last index with positive weight.
    If no weight is positive (a residual that rounding emptied, possible when target and draft
    agree within the row-sum tolerance), the sample is drawn from ``fallback`` instead.
    """
    if fallback is not None and not bool((weights > 0).any()):
        weights = fallback
    cdf = torch.cumsum(weights.double(), 0)
    target = u * cdf[-1].item()
    hits = torch.nonzero(cdf > target)
    if hits.numel():
        return int(hits[0])
    return int(torch.nonzero(weights > 0)[-1])


def _normalize(r: torch.Tensor) -> torch.Tensor:
    """``r / sum(r)`` with a float64 sequential sum, rounded back to float32; unchanged if the sum is 0."""
    total = torch.cumsum(r.double(), 0)[-1]
    if total.item() <= 0.0:
        return r
    return (r.double() / total).float()


# ---------------------------------------------------------------------------------------------
# 1. tree_metadata
# ---------------------------------------------------------------------------------------------
def tree_metadata(parents: torch.Tensor, num_nodes: torch.Tensor | None = None):
    """Packed ancestor mask, depth and child lists of a batch of trees.

    Args:
        parents: int32/int64 ``[B, N]``, see the module docstring.
        num_nodes: optional int32/int64 ``[B]``, ``1 <= num_nodes[b] <= N``.

    Returns:
        packed_mask: int32 ``[B, N, ceil(N/32)]``: bit ``j`` of word ``w`` in row ``i`` is set iff
            node ``32*w + j`` is ``i`` or an ancestor of ``i`` (least-significant bit first).
        depth: int32 ``[B, N]``: the root has depth 0, a child one more than its parent.
        first_child: int32 ``[B, N]``: the smallest-index child of ``i``, or -1.
        next_sibling: int32 ``[B, N]``: the next larger-index child of ``i``'s parent, or -1.
    """
    B, N = parents.shape
    W = (N + 31) // 32
    mask = torch.zeros(B, N, W, dtype=torch.int64)  # int64 so bit 31 needs no sign care here
    depth = torch.zeros(B, N, dtype=torch.int32)
    first_child = torch.full((B, N), -1, dtype=torch.int32)
    next_sibling = torch.full((B, N), -1, dtype=torch.int32)
    for b in range(B):
        n = N if num_nodes is None else int(num_nodes[b])
        last_child = [-1] * n
        for i in range(n):
            p = int(parents[b, i])
            if i > 0:
                mask[b, i] = mask[b, p]          # ancestors of i = ancestors of its parent ...
                depth[b, i] = depth[b, p] + 1
                if first_child[b, p] < 0:        # children are linked in index order
                    first_child[b, p] = i
                else:
                    next_sibling[b, last_child[p]] = i
                last_child[p] = i
            mask[b, i, i // 32] |= 1 << (i % 32)  # ... plus i itself
    # reinterpret the low 32 bits as int32 (two's complement), as the kernels store them
    mask = torch.where(mask >= 1 << 31, mask - (1 << 32), mask).to(torch.int32)
    return mask, depth, first_child, next_sibling


def _path(parents: torch.Tensor, node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = int(parents[node])
    return path[::-1]


def _children(parents: torch.Tensor, u: int, n: int) -> list[int]:
    return [c for c in range(u + 1, n) if int(parents[c]) == u]


def _pack_path(path: list[int], width: int) -> torch.Tensor:
    out = torch.full((width,), -1, dtype=torch.int32)
    out[: len(path)] = torch.tensor(path, dtype=torch.int32)
    return out


def _max_depth(parents: torch.Tensor, max_depth: int | None) -> int:
    return parents.shape[1] - 1 if max_depth is None else max_depth


# ---------------------------------------------------------------------------------------------
# 2. verify_greedy
# ---------------------------------------------------------------------------------------------
def verify_greedy(tokens, parents, target_logits, num_nodes=None, max_depth=None):
    """Greedy tree verification: follow the target's argmax down the tree.

    Args:
        tokens: int64 ``[B, N]``; parents: int32/int64 ``[B, N]``;
        target_logits: float32/float16/bfloat16 ``[B, N, V]``;
        num_nodes: optional ``[B]``; max_depth: static bound on tree depth (default ``N - 1``).

    Returns:
        accepted_len: int32 ``[B]``, draft tokens accepted (bonus excluded);
        accepted_nodes: int32 ``[B, max_depth + 1]``, the accepted path root first, -1 padded;
        bonus_token: int64 ``[B]``.
    """
    B, N = tokens.shape
    L = _max_depth(parents, max_depth) + 1
    accepted_len = torch.zeros(B, dtype=torch.int32)
    accepted_nodes = torch.full((B, L), -1, dtype=torch.int32)
    bonus = torch.zeros(B, dtype=torch.int64)
    for b in range(B):
        n = N if num_nodes is None else int(num_nodes[b])
        u, path = 0, [0]
        while True:
            t = int(torch.argmax(target_logits[b, u]))  # ties -> lowest id
            nxt = [c for c in _children(parents[b], u, n) if int(tokens[b, c]) == t]
            if not nxt:                                  # no child carries the target's token
                break
            u = nxt[0]                                   # first matching child in index order
            path.append(u)
        accepted_len[b] = len(path) - 1
        accepted_nodes[b] = _pack_path(path, L)
        bonus[b] = t
    return accepted_len, accepted_nodes, bonus


# ---------------------------------------------------------------------------------------------
# 3. verify_sample: multi-draft recursive rejection sampling
# ---------------------------------------------------------------------------------------------
def _drafts(draft_lens, b: int, D: int) -> int:
    return D if draft_lens is None else int(draft_lens[b])


def verify_sample(draft_tokens, parents, target_probs, draft_probs, seed, offset,
                  siblings_without_replacement=False, draft_lens=None, max_depth=None):
    """Lossless tree verification by recursive rejection sampling.

    At node ``u`` with target distribution ``p = target_probs[u]``, try the children ``c`` of ``u``
    in index order, child ``c`` carrying draft ``x = draft_tokens[c-1]`` drawn from
    ``q = draft_probs[c-1]``::

        accept x  iff  uniform * q(x) < p(x)          (probability min(1, p(x)/q(x)))
        on reject:  p <- normalize(max(p - q, 0))     (the residual; Leviathan et al. 2023)

    Siblings drawn i.i.d. from one distribution carry the same row; a child drawn from its own
    distribution (SpecInfer's several drafters) carries its own. With siblings_without_replacement
    the children of ``u`` were drawn without replacement from the row of the first child, which
    then stays the draft distribution of the group: after a rejection of ``x``,
    ``q(x) <- 0; q <- normalize(q)`` (Jeon et al. 2024); later siblings' rows are not read.

    An accepted child becomes ``u`` and the walk goes on; when every child is rejected (or ``u``
    is a leaf) the bonus token is sampled from the current ``p``. The test of child ``c`` uses
    ``uniform(seed[b], offset[b], c, 0)``, the bonus drawn at the final node ``u``
    ``uniform(seed[b], offset[b], u, 1)``.

    Args:
        draft_tokens: int32/int64 ``[B, D]`` (draft j = node j+1); parents: int32/int64 ``[B, D+1]``;
        target_probs: float32 ``[B, D+1, V]``; draft_probs: float32 ``[B, D, V]``, rows summing to 1;
        seed, offset: ints or int64 ``[B]``; draft_lens: optional ``[B]`` in ``[0, D]`` (request b
        uses nodes 0..draft_lens[b]); max_depth: static bound on tree depth (default ``D``).

    Returns: accepted_len int32 ``[B]``, accepted_nodes int32 ``[B, max_depth+1]``, bonus_token int64 ``[B]``.
    """
    B, N = parents.shape
    L = _max_depth(parents, max_depth) + 1
    accepted_len = torch.zeros(B, dtype=torch.int32)
    accepted_nodes = torch.full((B, L), -1, dtype=torch.int32)
    bonus = torch.zeros(B, dtype=torch.int64)
    for b in range(B):
        n = _drafts(draft_lens, b, N - 1) + 1
        s, o = _word(seed, b), _word(offset, b)
        u, path = 0, [0]
        p = target_probs[b, 0].float().clone()
        descended = True
        while descended:
            descended, q = False, None
            for c in _children(parents[b], u, n):
                if q is None or not siblings_without_replacement:
                    q = draft_probs[b, c - 1].float().clone()   # the distribution draft c was drawn from
                x = int(draft_tokens[b, c - 1])
                if uniform(s, o, c, 0) * float(q[x]) < float(p[x]):  # accept with prob min(1, p/q)
                    u = c
                    path.append(c)
                    p = target_probs[b, c].float().clone()  # fresh target distribution below c
                    descended = True
                    break
                p = _normalize(torch.clamp(p - q, min=0.0))  # residual after a rejection
                if siblings_without_replacement:
                    q[x] = 0.0
                    q = _normalize(q)
        bonus[b] = _sample(p, uniform(s, o, u, 1), fallback=target_probs[b, u].float())
        accepted_len[b] = len(path) - 1
        accepted_nodes[b] = _pack_path(path, L)
    return accepted_len, accepted_nodes, bonus


# ---------------------------------------------------------------------------------------------
# 4. verify_block: block verification of a chain (Sun et al., ICLR 2025, arXiv 2403.10444)
# ---------------------------------------------------------------------------------------------
def verify_block(draft_tokens, target_probs, draft_probs, seed, offset, draft_lens=None):
    """Block verification of a chain of ``d = draft_lens[b]`` drafts: lossless, and never fewer
    expected accepted tokens than token-wise verification (optimal among verifiers that see only
    on-path probabilities).

    With ``p_i = target_probs[i]`` (the target after i drafts), ``q_i = draft_probs[i]`` and
    drafts ``X_1..X_d`` (``X_{i+1} = draft_tokens[i] ~ q_i``), keep a running weight::

        w_0 = 1,   w_i = min(1, w_{i-1} * p_{i-1}(X_i) / q_{i-1}(X_i))
        r_i(x) = max(w_i * p_i(x) - q_i(x), 0)                 # residual mass after i accepted
        h_i = sum(r_i) / (sum(r_i) + 1 - w_i)  for i < d,   h_d = w_d
        tau = the largest i in 1..d with eta_i <= h_i (eta_i uniform), else 0
        bonus ~ normalize(r_tau)  if tau < d,   else ~ p_d

    Uniforms: ``eta_i = uniform(seed[b], offset[b], i, 0)``, the bonus ``uniform(seed[b], offset[b], tau, 1)``.

    Args:
        draft_tokens: int32/int64 ``[B, D]``; target_probs: float32 ``[B, D+1, V]``;
        draft_probs: float32 ``[B, D, V]``; seed, offset: ints or int64 ``[B]``;
        draft_lens: optional ``[B]`` in ``[0, D]`` (default D).

    Returns: accepted_len int32 ``[B]`` (= tau), bonus_token int64 ``[B]``.
    """
    B, D = draft_tokens.shape
    accepted_len = torch.zeros(B, dtype=torch.int32)
    bonus = torch.zeros(B, dtype=torch.int64)
    for b in range(B):
        d = _drafts(draft_lens, b, D)
        s, o = _word(seed, b), _word(offset, b)

        def residual(i: int, w: float) -> torch.Tensor:  # r_i = max(w_i p_i - q_i, 0), float64 maths
            return torch.clamp(w * target_probs[b, i].double() - draft_probs[b, i].double(), min=0.0).float()

        w, tau = 1.0, 0
        residuals = [residual(0, 1.0)] if d else []
        for i in range(1, d + 1):
            x = int(draft_tokens[b, i - 1])
            p_x, q_x = float(target_probs[b, i - 1, x]), float(draft_probs[b, i - 1, x])
            w = min(1.0, w * p_x / q_x) if q_x > 0 else (1.0 if p_x > 0 else 0.0)
            if i < d:
                residuals.append(residual(i, w))
                mass = torch.cumsum(residuals[i].double(), 0)[-1].item()
                h = mass / (mass + 1.0 - w) if mass + 1.0 - w > 0 else 1.0
            else:
                h = w
            if uniform(s, o, i, 0) <= h:
                tau = i
        ub = uniform(s, o, tau, 1)
        if tau < d:
            bonus[b] = _sample(residuals[tau], ub, fallback=target_probs[b, tau].float())
        else:
            bonus[b] = _sample(target_probs[b, d].float(), ub)
        accepted_len[b] = tau
    return accepted_len, bonus


# ---------------------------------------------------------------------------------------------
# 5. accepted_kv_indices
# ---------------------------------------------------------------------------------------------
def accepted_kv_indices(accepted_nodes, accepted_len, cache_lens):
    """Where to move the accepted path's KV entries so the cache stays contiguous.

    The step appended the tree's N tokens to request b's cache at ``cache_lens[b] .. + N-1`` (node
    i at ``cache_lens[b] + i``). The accepted path ``accepted_nodes[b, 0..accepted_len[b]]`` (root
    first) must end up at ``cache_lens[b] + 0 .. accepted_len[b]``; the bonus token is not in the
    cache yet (it is the next step's root).

    Args:
        accepted_nodes: int32 ``[B, L]``; accepted_len: int32 ``[B]``; cache_lens: int32 ``[B]``.

    Returns:
        src: int32 ``[B, L]``, ``cache_lens[b] + accepted_nodes[b, i]`` for ``i <= accepted_len[b]``, else -1;
        dst: int32 ``[B, L]``, ``cache_lens[b] + i`` for ``i <= accepted_len[b]``, else -1;
        new_cache_lens: int32 ``[B]``, ``cache_lens[b] + accepted_len[b] + 1``.
    """
    B, L = accepted_nodes.shape
    src = torch.full((B, L), -1, dtype=torch.int32)
    dst = torch.full((B, L), -1, dtype=torch.int32)
    for b in range(B):
        for i in range(int(accepted_len[b]) + 1):
            src[b, i] = int(cache_lens[b]) + int(accepted_nodes[b, i])
            dst[b, i] = int(cache_lens[b]) + i
    new_lens = (cache_lens.to(torch.int32) + accepted_len.to(torch.int32) + 1).to(torch.int32)
    return src, dst, new_lens
