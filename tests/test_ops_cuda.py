"""CUDA ops against the C++ CPU ops: exact for tree_metadata, verify_greedy and
accepted_kv_indices; exact on dyadic inputs (where every float64 sum is exact, so the block
reductions cannot round differently from the CPU's sequential sums) and statistically otherwise
for verify_sample and verify_block (per-request streams, ragged draft_lens, int32 and int64
draft tokens; a request's verdict independent of its batch position). Also the documented
verdict for invalid data that reaches the kernels without validation.

Skipped without a CUDA GPU or without a CUDA build of trtspec._C. Setting
TRTSPEC_CUDA_TEST_DEVICE=cpu runs the same comparisons CPU against CPU, a dry run of this file's
logic on machines without a GPU (it proves nothing about the CUDA kernels).
"""
from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.cuda

DEVICE = os.environ.get("TRTSPEC_CUDA_TEST_DEVICE", "cuda")


def _skip_reason() -> str | None:
    if DEVICE == "cuda" and not torch.cuda.is_available():
        return "no CUDA GPU (or torch is a CPU build)"
    try:
        import trtspec.ops  # noqa: F401  (loads trtspec._C)
        parents = torch.tensor([[-1]], dtype=torch.int32, device=DEVICE)
        torch.ops.trtspec.tree_metadata(parents, None)
    except (ImportError, OSError) as e:
        return f"trtspec._C not importable: {e}"
    except RuntimeError as e:
        if "no CUDA kernels" in str(e):
            return "trtspec._C was built without CUDA kernels"
        raise
    return None


@pytest.fixture(scope="module", autouse=True)
def _needs_cuda_build():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


def _ops():
    from trtspec import ops

    return ops


def _parents(g, B, N, kind):
    parents = torch.empty(B, N, dtype=torch.int32)
    parents[:, 0] = -1
    for i in range(1, N):
        if kind == "chain":
            parents[:, i] = i - 1
        else:
            parents[:, i] = torch.randint(max(0, i - 4), i, (B,), generator=g, dtype=torch.int32)
    return parents


def _num_nodes(g, B, N):
    return torch.randint(1, N + 1, (B,), generator=g, dtype=torch.int32)


def _dev(*tensors):
    return [t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in tensors]


def _assert_same(cuda_out, cpu_out):
    for i, (a, b) in enumerate(zip(cuda_out, cpu_out)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a.cpu(), b), f"output {i} differs at {torch.nonzero(a.cpu() != b)[:5].tolist()}"


SIZES = [(1, 1), (3, 2), (99, 5), (3, 33), (3, 64)]


@pytest.mark.parametrize("B, N", SIZES)
@pytest.mark.parametrize("kind", ["chain", "tree"])
@pytest.mark.parametrize("with_num_nodes", [False, True])
def test_tree_metadata_equals_cpu(B, N, kind, with_num_nodes):
    g = torch.Generator().manual_seed(B * 1000 + N)
    parents = _parents(g, B, N, kind)
    nn = _num_nodes(g, B, N) if with_num_nodes else None
    ops = _ops()
    _assert_same(ops.tree_metadata(*_dev(parents, nn)), ops.tree_metadata(parents, nn))


def _greedy_inputs(g, B, N, V, kind, dtype):
    parents = _parents(g, B, N, kind)
    logits = torch.randint(-3, 4, (B, N, V), generator=g).to(dtype)  # small integers: many ties
    top = torch.argmax(logits, -1)
    tokens = torch.randint(0, V, (B, N), generator=g)
    follow = torch.rand(B, N, generator=g) < 0.6  # make most nodes carry their parent's argmax
    tokens = torch.where(follow, torch.gather(top, 1, parents.clamp(min=0).long()), tokens)
    return tokens, parents, logits


@pytest.mark.parametrize("B, N", SIZES)
@pytest.mark.parametrize("V", [7, 111, 32000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_verify_greedy_equals_cpu(B, N, V, dtype, kind):
    if V == 32000 and B * N > 200:
        B = 3
    g = torch.Generator().manual_seed(B + N + V)
    tokens, parents, logits = _greedy_inputs(g, B, N, V, kind, dtype)
    nn = _num_nodes(g, B, N) if kind == "tree" else None
    ops = _ops()
    _assert_same(ops.verify_greedy(*_dev(tokens, parents, logits, nn)), ops.verify_greedy(tokens, parents, logits, nn))


def test_verify_greedy_nan_counts_as_maximum_like_torch_argmax():
    logits = torch.zeros(1, 2, 9)
    logits[0, 0, 5] = float("nan")
    logits[0, 0, 2] = 10.0
    tokens = torch.tensor([[0, 5]])
    parents = torch.tensor([[-1, 0]], dtype=torch.int32)
    out = _ops().verify_greedy(*_dev(tokens, parents, logits))
    assert out[0].tolist() == [1] and out[2].tolist() == [0]  # row 1 is all zeros: argmax 0


def test_accepted_kv_indices_equals_cpu():
    g = torch.Generator().manual_seed(5)
    B, N = 99, 33
    tokens, parents, logits = _greedy_inputs(g, B, N, 111, "tree", torch.float32)
    ops = _ops()
    acc_len, acc_nodes, _ = ops.verify_greedy(tokens, parents, logits)
    cache = torch.randint(0, 5000, (B,), generator=g, dtype=torch.int32)
    _assert_same(ops.accepted_kv_indices(*_dev(acc_nodes, acc_len, cache)),
                 ops.accepted_kv_indices(acc_nodes, acc_len, cache))


def _dyadic_probs(g, B, N, V):
    """Rows k / 2**m summing exactly to 1 (2**m >= 1024 and >= 2V, so every k >= 1): every float64
    sum of them (and of their residuals) is exact."""
    denominator = 1 << max(10, (2 * V).bit_length())
    weights = torch.rand(B, N, V, generator=g) ** 3
    counts = torch.floor(weights / weights.sum(-1, keepdim=True) * (denominator - V)).long() + 1
    counts[..., 0] += denominator - counts.sum(-1)
    return (counts.double() / denominator).float()


def _sample_inputs(g, B, N, V, kind, probs):
    """The sampled ops' layout: draft_tokens [B, N-1], parents [B, N], target [B, N, V], draft rows
    [B, N-1, V] (draft j drawn from its parent's row)."""
    parents = _parents(g, B, N, kind)
    target, node_rows = probs(g, B, N, V), probs(g, B, N, V)
    idx = parents[:, 1:].long()
    draft = node_rows.gather(1, idx[..., None].expand(B, N - 1, V)).contiguous()
    tokens = torch.multinomial(draft.reshape(-1, V), 1, generator=g).reshape(B, N - 1) if N > 1 else \
        torch.zeros(B, 0, dtype=torch.int64)
    return tokens, parents, target, draft


def _streams(g, B):
    return torch.randint(-2**63, 2**63 - 1, (B,), generator=g), torch.randint(0, 2**40, (B,), generator=g)


@pytest.mark.parametrize("B, N", [(1, 1), (3, 5), (99, 5), (3, 33)])
@pytest.mark.parametrize("V", [7, 111, 32000])
@pytest.mark.parametrize("kind", ["chain", "tree"])
@pytest.mark.parametrize("without_replacement", [False, True])
def test_verify_sample_equals_cpu_on_dyadic_inputs(B, N, V, kind, without_replacement):
    if V == 32000:
        B = min(B, 3)
    g = torch.Generator().manual_seed(B * 7 + N + V)
    tokens, parents, target, draft = _sample_inputs(g, B, N, V, kind, _dyadic_probs)
    lens = torch.randint(0, N, (B,), generator=g) if kind == "tree" else None
    ops = _ops()
    for seed, offset in [(0, 0), _streams(g, B)]:
        _assert_same(ops.verify_sample(*_dev(tokens.int(), parents, target, draft, seed, offset), without_replacement,
                                       *_dev(lens)),
                     ops.verify_sample(tokens, parents, target, draft, seed, offset, without_replacement, lens))


def test_a_requests_cuda_verdict_does_not_depend_on_its_batch_position():
    g = torch.Generator().manual_seed(12)
    B, N, V = 24, 9, 111
    tokens, parents, target, draft = _sample_inputs(g, B, N, V, "tree", _dyadic_probs)
    seed, offset = _streams(g, B)
    ops = _ops()
    full = [t.cpu() for t in ops.verify_sample(*_dev(tokens, parents, target, draft, seed, offset))]
    perm = torch.randperm(B, generator=g)
    moved = [t.cpu() for t in ops.verify_sample(*_dev(tokens[perm], parents[perm], target[perm], draft[perm],
                                                      seed[perm], offset[perm]))]
    for a, b in zip(full, moved):
        assert torch.equal(a[perm], b)
    block = [t.cpu() for t in ops.verify_block(*_dev(tokens, target, draft, seed, offset))]
    block_moved = [t.cpu() for t in ops.verify_block(*_dev(tokens[perm], target[perm], draft[perm], seed[perm],
                                                           offset[perm]))]
    for a, b in zip(block, block_moved):
        assert torch.equal(a[perm], b)


def _softmax_probs(g, B, N, V):
    return torch.softmax(torch.randn(B, N, V, generator=g) * 2, -1)


@pytest.mark.parametrize("kind", ["chain", "tree"])
def test_verify_sample_agrees_with_cpu_on_general_inputs(kind):
    """Float64 sums associate differently: allow a draw to differ only where it lands within rounding."""
    g = torch.Generator().manual_seed(11)
    B, N, V = 512, 9, 111
    tokens, parents, target, draft = _sample_inputs(g, B, N, V, kind, _softmax_probs)
    seed, offset = _streams(g, B)
    ops = _ops()
    cuda = [t.cpu() for t in ops.verify_sample(*_dev(tokens, parents, target, draft, seed, offset))]
    cpu = ops.verify_sample(tokens, parents, target, draft, seed, offset)
    same = (cuda[0] == cpu[0]) & (cuda[1] == cpu[1]).all(1) & (cuda[2] == cpu[2])
    assert same.float().mean() >= 0.995


def _chi_square_ok(samples: torch.Tensor, probs: torch.Tensor) -> tuple[bool, float]:
    from scipy.stats import chisquare

    counts = torch.bincount(samples, minlength=probs.numel()).double()
    expected = probs.double() * counts.sum()
    keep = expected >= 5  # pool the rare tail into one cell
    obs = torch.cat([counts[keep], counts[~keep].sum()[None]])
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]])
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    p = chisquare(obs.numpy(), exp.numpy()).pvalue
    return p > 1e-4, p


@pytest.mark.parametrize("siblings", [1, 4])
def test_verify_sample_first_token_follows_the_target(siblings):
    """Emitted first token (the first accepted child's token, else the bonus) ~ target_probs[0]."""
    g = torch.Generator().manual_seed(siblings)
    V, B = 13, 40000
    p0 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)
    q0 = torch.softmax(torch.randn(V, generator=g) * 1.5, -1)
    N = 1 + siblings
    parents = torch.tensor([-1] + [0] * siblings, dtype=torch.int32).repeat(B, 1)
    target = p0.repeat(B, N, 1)
    draft = q0.repeat(B, N - 1, 1)
    tokens = torch.multinomial(q0, B * siblings, replacement=True, generator=g).reshape(B, siblings)
    seed = torch.arange(B, dtype=torch.int64) + 7 * 2**32               # every request its own stream
    acc_len, acc_nodes, bonus = _ops().verify_sample(*_dev(tokens, parents, target, draft, seed), 0)
    acc_len, acc_nodes, bonus = acc_len.cpu(), acc_nodes.cpu(), bonus.cpu()
    first = torch.where(acc_len > 0, tokens.gather(1, (acc_nodes[:, 1:2].long() - 1).clamp(min=0))[:, 0], bonus)
    ok, p = _chi_square_ok(first, p0)
    assert ok, f"chi-square p = {p:.2e}"


def test_verify_block_first_token_follows_the_target_and_agrees_with_cpu():
    g = torch.Generator().manual_seed(3)
    V, B, D = 11, 40000, 3
    p = torch.softmax(torch.randn(D + 1, V, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(D, V, generator=g) * 1.5, -1)
    drafts = torch.stack([torch.multinomial(q[i], B, replacement=True, generator=g) for i in range(D)], 1)
    target, draft = p.repeat(B, 1, 1), q.repeat(B, 1, 1)
    seed, offset = torch.arange(B, dtype=torch.int64) * 3, torch.full((B,), 6)
    ops = _ops()
    acc, bonus = (t.cpu() for t in ops.verify_block(*_dev(drafts.int(), target, draft, seed, offset)))
    first = torch.where(acc > 0, drafts[:, 0], bonus)
    ok, pv = _chi_square_ok(first, p[0])
    assert ok, f"chi-square p = {pv:.2e}"
    acc_cpu, bonus_cpu = ops.verify_block(drafts, target, draft, seed, offset)
    assert ((acc == acc_cpu) & (bonus == bonus_cpu)).float().mean() >= 0.995


def test_verify_block_equals_cpu_where_weights_stay_dyadic():
    """Drafts with p(x) >= q(x) keep every weight at 1, so residuals p - q and their sums are exact."""
    g = torch.Generator().manual_seed(8)
    B, D, V = 99, 4, 111
    target, draft = _dyadic_probs(g, B, D + 1, V), _dyadic_probs(g, B, D, V)
    better = target[:, :D] >= draft
    x = torch.multinomial(better.reshape(-1, V).float(), 1, generator=g).reshape(B, D)
    lens = torch.randint(0, D + 1, (B,), generator=g)
    ops = _ops()
    for seed in (0, 17):
        _assert_same(ops.verify_block(*_dev(x, target, draft), seed, 1), ops.verify_block(x, target, draft, seed, 1))
        _assert_same(ops.verify_block(*_dev(x, target, draft), seed, 1, *_dev(lens)),
                     ops.verify_block(x, target, draft, seed, 1, lens))


@pytest.mark.skipif(DEVICE != "cuda", reason="the invalid-data verdict is the CUDA kernels' contract")
def test_invalid_tree_reaching_the_kernel_gets_the_documented_verdict():
    """Raw op, no Python validation: a bad parent / token id gives accepted_len 0, nodes -1, bonus -1."""
    parents = torch.tensor([[-1, 0, 7], [-1, 0, 1]], dtype=torch.int32, device="cuda")  # row 0: parent 7 > 2
    tokens = torch.tensor([[0, 1, 2], [0, 1, 10**9]], device="cuda")                   # row 1: token >= V
    logits = torch.randn(2, 3, 5, device="cuda")
    try:
        acc, nodes, bonus = torch.ops.trtspec.verify_greedy(tokens, parents, logits, None, None)
    except RuntimeError as e:  # the binding may reject it first: then it must say why
        assert "parent" in str(e).lower() or "token" in str(e).lower()
        return
    assert acc.tolist() == [0, 0] and bonus.tolist() == [-1, -1]
    assert (nodes == -1).all()


@pytest.mark.skipif(DEVICE != "cuda", reason="the invalid-data verdict is the CUDA kernels' contract")
def test_invalid_draft_lens_or_token_reaching_the_sampled_kernels_gets_the_documented_verdict():
    """Raw ops, no Python validation: draft_lens outside [0, D] or a used token >= V gives that
    request accepted_len 0 (accepted_nodes -1) and bonus -1; its neighbours are verified."""
    B, D, V = 3, 2, 5
    dev = "cuda"
    tokens = torch.tensor([[0, 1], [0, 9], [1, 9]], device=dev)              # row 2's 9 is padding (d = 1)
    lens = torch.tensor([3, 2, 1], dtype=torch.int32, device=dev)             # row 0: past D
    parents = torch.tensor([[-1, 0, 1]] * B, dtype=torch.int32, device=dev)
    target = torch.full((B, D + 1, V), 1.0 / V, device=dev)
    draft = torch.full((B, D, V), 1.0 / V, device=dev)
    seed = offset = torch.zeros(B, dtype=torch.int64, device=dev)
    acc, nodes, bonus = torch.ops.trtspec.verify_sample(tokens, parents, target, draft, seed, offset, False, lens, None)
    assert acc[:2].tolist() == [0, 0] and bonus[:2].tolist() == [-1, -1] and (nodes[:2] == -1).all()
    assert acc[2] == 1 and 0 <= bonus[2] < V
    acc, bonus = torch.ops.trtspec.verify_block(tokens, target, draft, seed, offset, lens)
    assert acc[:2].tolist() == [0, 0] and bonus[:2].tolist() == [-1, -1]
    assert acc[2] == 1 and 0 <= bonus[2] < V
