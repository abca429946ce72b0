"""Every op equals trtspec.reference exactly (CPU), on fresh random chains and trees."""
from __future__ import annotations

import pytest
import torch

from trtspec import ops, reference

# (B, N, V): awkward sizes; large V only with a small batch (the reference is Python loops)
SIZES = [(1, 1, 7), (3, 2, 111), (99, 5, 7), (3, 33, 111), (1, 64, 32000), (99, 64, 7), (3, 5, 32000), (99, 33, 111)]
KINDS = ["chain", "tree", "tree+num_nodes"]


def _equal(out, ref):
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert torch.equal(o, r), (o, r)


def _tree(gen, random_parents, B, N, kind):
    parents = random_parents(gen, B, N, "chain" if kind == "chain" else "tree")
    num_nodes = None
    if kind.endswith("num_nodes"):
        num_nodes = torch.randint(1, N + 1, (B,), generator=gen, dtype=torch.int32)
    return parents, num_nodes


@pytest.mark.parametrize("B,N", [(1, 1), (3, 2), (99, 5), (3, 33), (1, 64), (99, 64)])
@pytest.mark.parametrize("kind", KINDS + ["star"])
def test_tree_metadata_matches_reference(gen, random_parents, B, N, kind):
    parents, num_nodes = _tree(gen, random_parents, B, N, kind)
    if kind == "star":
        parents = random_parents(gen, B, N, "star")
    _equal(ops.tree_metadata(parents, num_nodes), reference.tree_metadata(parents, num_nodes))


def _greedy_tokens(gen, parents, logits, hit=0.6):
    """Node i carries the target's argmax after its parent with probability `hit`, else a random id."""
    B, N, V = logits.shape
    best = logits.float().argmax(-1)  # [B, N]
    tokens = torch.randint(0, V, (B, N), generator=gen)
    for i in range(1, N):
        take = torch.rand(B, generator=gen) < hit
        tokens[:, i] = torch.where(take, best[torch.arange(B), parents[:, i].long()], tokens[:, i])
    return tokens


@pytest.mark.parametrize("B,N,V", SIZES)
@pytest.mark.parametrize("kind", KINDS)
def test_verify_greedy_matches_reference(gen, random_parents, B, N, V, kind):
    parents, num_nodes = _tree(gen, random_parents, B, N, kind)
    logits = torch.randn(B, N, V, generator=gen)
    tokens = _greedy_tokens(gen, parents, logits)
    _equal(ops.verify_greedy(tokens, parents, logits, num_nodes),
           reference.verify_greedy(tokens, parents, logits, num_nodes))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("B,N,V", [(3, 33, 111), (99, 5, 7), (1, 64, 32000)])
def test_verify_greedy_ties_and_half_precision(gen, random_parents, dtype, B, N, V):
    """Integer logits make many ties (lowest id wins); float16/bfloat16 are read natively."""
    parents = random_parents(gen, B, N, "tree")
    logits = torch.randint(-3, 4, (B, N, V), generator=gen).to(dtype)
    logits[..., : V // 3] *= 0.5  # some fractional values, still exact in every dtype
    tokens = _greedy_tokens(gen, parents, logits, hit=0.8)
    out = ops.verify_greedy(tokens, parents, logits, max_depth=N + 2)
    _equal(out, reference.verify_greedy(tokens, parents, logits, max_depth=N + 2))
    assert int(out[0].max()) > 0  # the walk went down somewhere


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_verify_greedy_nan_inf_and_signed_zero_like_torch_argmax(gen, dtype):
    V = 300
    logits = torch.full((4, 2, V), float("-inf")).to(dtype)
    logits[0, 0, 17] = float("nan")
    logits[0, 0, 250] = float("nan")
    logits[0, 0, 5] = float("inf")          # NaN beats +Inf; the first NaN wins
    logits[1, 0, 40] = float("inf")
    logits[1, 0, 260] = float("inf")        # tie between +Infs: lowest id
    logits[2, 0, 9] = -0.0
    logits[2, 0, 3] = 0.0                   # -0 == +0: lowest id (3)
    # row 3: all -inf: id 0
    parents = torch.tensor([[-1, 0]] * 4, dtype=torch.int32)
    tokens = torch.tensor([[0, 1]] * 4)
    out = ops.verify_greedy(tokens, parents, logits)
    _equal(out, reference.verify_greedy(tokens, parents, logits))
    assert out[2].tolist() == [17, 40, 3, 0]


def _streams(gen, B):
    """Per-request (seed, offset): int64 [B] with the full 64-bit range (negative = above 2**63)."""
    seed = torch.randint(-2**63, 2**63 - 1, (B,), generator=gen)
    offset = torch.randint(0, 2**40, (B,), generator=gen)
    return seed, offset


@pytest.mark.parametrize("B,N,V", SIZES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("without_replacement", [False, True])
def test_verify_sample_matches_reference(gen, random_parents, distributions, draw_tokens, per_draft, B, N, V, kind,
                                         without_replacement):
    parents, num_nodes = _tree(gen, random_parents, B, N, kind)
    draft_lens = None if num_nodes is None else num_nodes - 1
    target, node_rows = distributions(gen, B, N, V, agreement=0.8)
    tokens = draw_tokens(gen, parents, node_rows)[:, 1:].contiguous()
    draft = per_draft(node_rows, parents)
    seed, offset = _streams(gen, B)
    out = ops.verify_sample(tokens, parents, target, draft, seed, offset, without_replacement, draft_lens)
    _equal(out, reference.verify_sample(tokens, parents, target, draft, seed, offset, without_replacement, draft_lens))


def test_verify_sample_siblings_with_their_own_rows_match_reference(gen, distributions):
    """SpecInfer's several drafters: siblings drawn from different rows; each test reads its own row."""
    B, D, V = 40, 6, 111
    parents = torch.tensor([[-1, 0, 0, 0, 1, 2, 3]] * B, dtype=torch.int32)
    target, _ = distributions(gen, B, D + 1, V, agreement=0.8)
    _, draft = distributions(gen, B, D, V, agreement=0.8)       # an independent row per draft
    tokens = torch.multinomial(draft.reshape(-1, V), 1, generator=gen).view(B, D)
    seed, offset = _streams(gen, B)
    out = ops.verify_sample(tokens, parents, target, draft, seed, offset)
    _equal(out, reference.verify_sample(tokens, parents, target, draft, seed, offset))
    assert int((out[0] > 0).sum()) > 0 and int((out[1][:, 1] > 1).sum()) > 0  # later siblings were accepted too


@pytest.mark.parametrize("B,D,V", [(1, 0, 7), (3, 1, 111), (99, 4, 7), (3, 32, 111), (1, 63, 32000), (99, 8, 111),
                                   (3, 4, 32000)])
@pytest.mark.parametrize("agreement", [0.5, 0.95])
@pytest.mark.parametrize("ragged", [False, True])
def test_verify_block_matches_reference(gen, random_parents, distributions, draw_tokens, B, D, V, agreement, ragged):
    parents = random_parents(gen, B, D + 1, "chain")
    target, draft = distributions(gen, B, D + 1, V, agreement=agreement)
    tokens = draw_tokens(gen, parents, draft)[:, 1:].contiguous()
    draft = draft[:, :D].contiguous()
    draft_lens = torch.randint(0, D + 1, (B,), generator=gen) if ragged else None
    seed, offset = _streams(gen, B)
    out = ops.verify_block(tokens, target, draft, seed, offset, draft_lens)
    _equal(out, reference.verify_block(tokens, target, draft, seed, offset, draft_lens))


@pytest.mark.parametrize("B,L", [(1, 1), (3, 2), (99, 5), (3, 33), (99, 64)])
def test_accepted_kv_indices_matches_reference(gen, B, L):
    accepted_len = torch.randint(0, L, (B,), generator=gen, dtype=torch.int32)
    accepted_nodes = torch.full((B, L), -1, dtype=torch.int32)
    for b in range(B):  # a strictly increasing path from the root
        n = int(accepted_len[b]) + 1
        accepted_nodes[b, :n] = torch.cat([torch.zeros(1), torch.randperm(4 * L, generator=gen)[: n - 1].sort().values + 1]).int()
    cache_lens = torch.randint(0, 10**6, (B,), generator=gen, dtype=torch.int32)
    out = ops.accepted_kv_indices(accepted_nodes, accepted_len, cache_lens)
    _equal(out, reference.accepted_kv_indices(accepted_nodes, accepted_len, cache_lens))


def test_verify_greedy_path_feeds_kv_indices(gen, random_parents):
    """accepted_nodes from verify_greedy is a valid accepted_kv_indices input."""
    parents = random_parents(gen, 5, 9, "tree")
    logits = torch.randn(5, 9, 50, generator=gen)
    tokens = _greedy_tokens(gen, parents, logits, hit=0.9)
    length, nodes, _ = ops.verify_greedy(tokens, parents, logits, max_depth=8)
    cache = torch.arange(5, dtype=torch.int32) * 100
    src, dst, new = ops.accepted_kv_indices(nodes, length, cache)
    assert torch.equal(new, cache + length + 1)
    assert torch.equal(src[:, 0], cache) and torch.equal(dst[:, 0], cache)


def test_empty_residual_falls_back_to_target_row():
    """p <= q everywhere (rows agree within the tolerance): a rejection leaves a zero residual;
    the bonus is then drawn from the target row, in the reference and the kernel alike."""
    p = torch.tensor([0.5, 0.4995, 0.0005], dtype=torch.float32)
    q = torch.tensor([0.5, 0.4996, 0.0004], dtype=torch.float32)
    p[2] = 0.0  # p <= q in every entry: max(p - q, 0) == 0
    p = p / p.sum() * (1 - 5e-4)
    assert bool((p <= q).all())
    parents = torch.tensor([[-1, 0]], dtype=torch.int32)
    tokens = torch.tensor([[1]])
    target = torch.stack([p, p]).unsqueeze(0).contiguous()
    draft = q[None, None].contiguous()
    # a seed whose test of node 1 (draw 0 at node 1) rejects token 1 (u * q(1) >= p(1))
    seed = next(s for s in range(100000) if reference.uniform(s, 0, 1, 0) * float(q[1]) >= float(p[1]))
    out = ops.verify_sample(tokens, parents, target, draft, seed, 0)
    _equal(out, reference.verify_sample(tokens, parents, target, draft, seed, 0))
    assert int(out[0]) == 0 and 0 <= int(out[2]) < 2
    # the same for block verification: tau = 0 with an empty residual r_0 (eta_1 = draw 0 at position 1)
    seed = next(s for s in range(100000) if reference.uniform(s, 0, 1, 0) > float(p[1]) / float(q[1]))
    out = ops.verify_block(tokens, target, draft, seed, 0)
    _equal(out, reference.verify_block(tokens, target, draft, seed, 0))
    assert int(out[0]) == 0


@pytest.mark.parametrize("V", [7, 111, 32000])
def test_verify_block_near_equal_distributions_match_reference(gen, V):
    """Target ~= draft: w_i == 1 and residual masses ~1e-9 make h_i ill-conditioned, so the kernel
    takes its exact (sequential-sum) path for the test eta_i <= h_i; it must still agree."""
    B, D = 16, 6
    draft = torch.softmax(torch.randn(B, D + 1, V, generator=gen), -1)
    target = (draft * (1 + 1e-7 * torch.randn(B, D + 1, V, generator=gen))).contiguous()
    tokens = torch.multinomial(draft[:, :D].reshape(-1, V), 1, generator=gen).view(B, D)
    draft = draft[:, :D].contiguous()
    for seed in range(4):
        out = ops.verify_block(tokens, target, draft, seed, 0)
        _equal(out, reference.verify_block(tokens, target, draft, seed, 0))
