"""Distribution tests of the sampling verifiers (seeded, CPU).

* verify_sample (chains; trees of 1-4 siblings drawn with or without replacement) and
  verify_block emit a first token distributed as the target (chi-square; every request with its
  own random stream, as in serving), and the same samples
  clearly reject the draft distribution and the distribution a wrong residual would give;
* the mean accepted length of a chain matches sum_k prod_{i<=k} a_i, a_i = sum_x min(p_i, q_i);
* verify_block accepts at least as much as token-wise verification, strictly more on the
  binary example of Sun et al. (2025);
* exact enumeration (uniforms integrated analytically): block verification is lossless for
  V = 2, 3 and D = 2, and a wrong acceptance rule is caught by the same check.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from trtspec import ops

SAMPLES = 40000
Z_1E4 = 3.719  # standard normal quantile for a one-sided 1e-4 test


def chi2_critical(df: int, z: float = Z_1E4) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile with df degrees of freedom."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() * counts.sum()
    keep = expected > 0
    assert int(counts[~keep].sum()) == 0, "a token with zero probability was emitted"
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


def _rows(gen, n, V, alpha=0.7):
    """n random distributions over V tokens (Dirichlet-like via exponentials)."""
    x = (-torch.log(torch.rand(n, V, generator=gen))) ** (1 / alpha)
    return (x / x.sum(-1, keepdim=True)).float()


def _streams(n, salt):
    """Request b's stream: seed salt * 2**32 + b (its own), offset b % 7 (shared by many)."""
    b = torch.arange(n, dtype=torch.int64)
    return salt * 2**32 + b, b % 7


def _first_token(draft_tokens, accepted_len, accepted_nodes, bonus):
    first = draft_tokens.gather(1, (accepted_nodes[:, 1:2].long() - 1).clamp(min=0)).squeeze(1)  # node c = draft c-1
    return torch.where(accepted_len > 0, first, bonus)


def _assert_target_distribution(first, p, q, V):
    counts = torch.bincount(first, minlength=V).double()
    crit = chi2_critical(V - 1)
    assert chi2(counts, p) < crit, (counts / counts.sum(), p)
    # the same samples reject the draft distribution and the naive "resample from p" residual,
    # so a wrong residual would fail this test
    beta = torch.minimum(p, q).sum()
    naive = torch.minimum(p, q) + (1 - beta) * p
    assert chi2(counts, q) > 10 * crit
    assert chi2(counts, naive) > 10 * crit


@pytest.mark.parametrize("siblings", [1, 2, 3, 4])
@pytest.mark.parametrize("without_replacement", [False, True])
def test_verify_sample_first_token_follows_target_on_trees(siblings, without_replacement):
    gen = torch.Generator().manual_seed(100 + siblings + 10 * without_replacement)
    V, n = 8, SAMPLES
    p, q = _rows(gen, 2, V)
    # a root with `siblings` children drawn from q (i.i.d. or without replacement), each with one child
    N = 1 + 2 * siblings
    parents = torch.tensor([-1] + [0] * siblings + list(range(1, siblings + 1)), dtype=torch.int32).repeat(n, 1)
    tokens = torch.zeros(n, N - 1, dtype=torch.int64)   # drafts: nodes 1..N-1
    tokens[:, :siblings] = torch.multinomial(q.expand(n, V), siblings, replacement=not without_replacement,
                                             generator=gen)
    tokens[:, siblings:] = torch.multinomial(q.expand(n, V), siblings, replacement=True, generator=gen)
    target = p.expand(n, N, V).contiguous()
    draft = q.expand(n, N - 1, V).contiguous()
    seed, offset = _streams(n, 7 + siblings)
    out = ops.verify_sample(tokens, parents, target, draft, seed, offset, siblings_without_replacement=without_replacement)
    _assert_target_distribution(_first_token(tokens, *out), p, q, V)


def test_verify_sample_chain_first_token_and_mean_accepted_length():
    gen = torch.Generator().manual_seed(5)
    V, D, n = 8, 4, SAMPLES
    p, q = _rows(gen, D + 1, V), _rows(gen, D + 1, V)
    parents = torch.arange(-1, D, dtype=torch.int32).repeat(n, 1)
    tokens = torch.stack([torch.multinomial(q[i].expand(n, V), 1, generator=gen).squeeze(1) for i in range(D)], 1)
    seed, offset = _streams(n, 11)
    out = ops.verify_sample(tokens, parents, p.expand(n, D + 1, V).contiguous(), q[:D].expand(n, D, V).contiguous(),
                            seed, offset)
    _assert_target_distribution(_first_token(tokens, *out), p[0], q[0], V)
    a = torch.minimum(p, q).double().sum(-1)[:D]           # a_k = sum_x min(p_{k-1}, q_{k-1})
    expected = float(torch.cumprod(a, 0).sum())            # E[accepted] = sum_k prod_{i<=k} a_i
    accepted = out[0].double()
    se = float(accepted.std()) / math.sqrt(n)
    assert abs(float(accepted.mean()) - expected) < 4.5 * se, (float(accepted.mean()), expected)


def _block_inputs(gen, p, q, n):
    D = q.shape[0]
    V = p.shape[1]
    tokens = torch.stack([torch.multinomial(q[i].expand(n, V), 1, generator=gen).squeeze(1) for i in range(D)], 1)
    return tokens, p.expand(n, D + 1, V).contiguous(), q.expand(n, D, V).contiguous()


def test_verify_block_first_token_follows_target():
    gen = torch.Generator().manual_seed(9)
    V, D = 8, 3
    p, q = _rows(gen, D + 1, V), _rows(gen, D, V)
    tokens, target, draft = _block_inputs(gen, p, q, SAMPLES)
    length, bonus = ops.verify_block(tokens, target, draft, *_streams(SAMPLES, 3))
    first = torch.where(length > 0, tokens[:, 0], bonus)
    _assert_target_distribution(first, p[0], q[0], V)


def _token_wise(tokens, target, draft, seed):
    """Token-wise speculative sampling of the same chain: verify_sample takes the very same tensors."""
    n, D = tokens.shape
    parents = torch.arange(-1, D, dtype=torch.int32).repeat(n, 1)
    return ops.verify_sample(tokens, parents, target, draft, *_streams(n, seed))[0]


def test_verify_block_accepts_at_least_token_wise_on_the_same_drafts():
    gen = torch.Generator().manual_seed(21)
    V, D = 5, 3
    for trial in range(3):
        p, q = _rows(gen, D + 1, V), _rows(gen, D, V)
        tokens, target, draft = _block_inputs(gen, p, q, SAMPLES // 2)
        block = ops.verify_block(tokens, target, draft, *_streams(len(tokens), trial))[0].double()
        token = _token_wise(tokens, target, draft, seed=trial).double()
        se = float((block - token).std()) / math.sqrt(len(block)) + 1e-12
        assert float(block.mean()) >= float(token.mean()) - 3 * se
        # and both agree with the exact expectations
        exact_block, exact_token = _exact_block(p.double(), q.double())[1], _token_wise_expectation(p, q)
        assert exact_block >= exact_token - 1e-12
        assert abs(float(block.mean()) - exact_block) < 4.5 * float(block.std()) / math.sqrt(len(block))


def test_verify_block_strictly_beats_token_wise_on_the_binary_example():
    """Sun et al. (2025): target (1/3, 2/3), draft (2/3, 1/3) at every position."""
    D, n = 2, SAMPLES
    p = torch.tensor([[1 / 3, 2 / 3]] * (D + 1))
    q = torch.tensor([[2 / 3, 1 / 3]] * D)
    exact_block, exact_token = _exact_block(p.double(), q.double())[1], _token_wise_expectation(p, q)
    assert exact_block > exact_token + 0.05  # 10/9 token-wise
    gen = torch.Generator().manual_seed(2)
    tokens, target, draft = _block_inputs(gen, p, q, n)
    block = ops.verify_block(tokens, target, draft, *_streams(n, 1))[0].double()
    token = _token_wise(tokens, target, draft, seed=1).double()
    se = float((block - token).std()) / math.sqrt(n)
    assert float(block.mean()) > float(token.mean()) + 4 * se
    assert abs(float(block.mean()) - exact_block) < 4.5 * float(block.std()) / math.sqrt(n)
    assert abs(float(token.mean()) - exact_token) < 4.5 * float(token.std()) / math.sqrt(n)


# ---- exact enumeration ---------------------------------------------------------------------
def _token_wise_expectation(p, q):
    a = torch.minimum(p[: q.shape[0]], q).double().sum(-1)
    return float(torch.cumprod(a, 0).sum())


def _exact_block(p, q, h_rule=None):
    """Distribution of one block-verification step's emission (accepted drafts + bonus) and
    E[tau], with the uniforms integrated out: P(tau = t | X) = h_t prod_{j>t} (1 - h_j)."""
    D, V = q.shape
    emitted, mean_tau = {}, 0.0
    for X in itertools.product(range(V), repeat=D):
        qx = math.prod(float(q[i, X[i]]) for i in range(D))
        if qx == 0:
            continue
        w = [1.0]
        for i in range(1, D + 1):
            px_, qx_ = float(p[i - 1, X[i - 1]]), float(q[i - 1, X[i - 1]])
            w.append(min(1.0, w[-1] * px_ / qx_))
        res = [torch.clamp(w[i] * p[i] - q[i], min=0.0) for i in range(D)]
        h = [None]
        for i in range(1, D + 1):
            if h_rule is not None:
                h.append(h_rule(i, w, res))
            elif i == D:
                h.append(w[D])
            else:
                mass = float(res[i].sum())
                h.append(mass / (mass + 1 - w[i]) if mass + 1 - w[i] > 0 else 1.0)
        for t in range(D + 1):
            pt = (h[t] if t else 1.0) * math.prod(1 - h[j] for j in range(t + 1, D + 1))
            if pt == 0:
                continue
            mean_tau += qx * pt * t
            bonus = p[D] if t == D else res[t] / res[t].sum()
            for y in range(V):
                key = tuple(X[:t]) + (y,)
                emitted[key] = emitted.get(key, 0.0) + qx * pt * float(bonus[y])
    return emitted, mean_tau


def _lossless_gap(p, emitted):
    """max over y in V^(D+1) of |P(step, then target continuation, emits y) - P_target(y)|."""
    D1, V = p.shape
    gap = 0.0
    for y in itertools.product(range(V), repeat=D1):
        target = math.prod(float(p[i, y[i]]) for i in range(D1))
        got = sum(emitted.get(tuple(y[: t + 1]), 0.0) * math.prod(float(p[i, y[i]]) for i in range(t + 1, D1))
                  for t in range(D1))
        gap = max(gap, abs(got - target))
    return gap


@pytest.mark.parametrize("V", [2, 3])
def test_block_verification_is_exactly_lossless(V):
    gen = torch.Generator().manual_seed(V)
    D = 2
    for _ in range(5):
        p, q = _rows(gen, D + 1, V).double(), _rows(gen, D, V).double()
        p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
        emitted, _ = _exact_block(p, q)
        assert _lossless_gap(p, emitted) < 1e-12
        # a wrong acceptance rule (accept the prefix with probability w_i, as if token-wise weights
        # were block weights) is caught by the same check
        wrong, _ = _exact_block(p, q, h_rule=lambda i, w, res: w[i])
        assert _lossless_gap(p, wrong) > 1e-4
