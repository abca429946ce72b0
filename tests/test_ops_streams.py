"""Per-request random streams and the one layout of the sampled verifiers (CPU, exact).

* a request's verdict is the same at every batch position, among any neighbours, and alone;
* Python ints broadcast exactly like explicit per-request ``seed`` / ``offset`` tensors;
* int32 token ids give the results of int64 ones;
* ragged batches (``draft_lens``) give each request the verdict it gets alone with its own drafts;
* on a chain of one draft, block verification is token-wise verification on the same uniform.
"""
from __future__ import annotations

import pytest
import torch

from trtspec import ops

V = 97


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and torch.equal(x, y), (x, y)


def _request(g, D, kind):
    """One request: (draft_tokens [1, D], parents [1, D+1], target [1, D+1, V], draft [1, D, V],
    seed [1], offset [1]); drafts drawn from their rows."""
    parents = torch.full((1, D + 1), -1, dtype=torch.int32)
    for i in range(1, D + 1):
        parents[0, i] = i - 1 if kind == "chain" else int(torch.randint(max(0, i - 3), i, (1,), generator=g))
    target = torch.softmax(2 * torch.randn(1, D + 1, V, generator=g), -1)
    node_rows = torch.softmax(2 * torch.randn(1, D + 1, V, generator=g) + target.log(), -1)
    draft = node_rows[:, parents[0, 1:].long()].contiguous()             # draft j drawn from its parent's row
    tokens = torch.multinomial(draft[0], 1, generator=g).view(1, D) if D else torch.zeros(1, 0, dtype=torch.int64)
    seed = torch.randint(-2**63, 2**63 - 1, (1,), generator=g)
    offset = torch.randint(0, 2**20, (1,), generator=g)
    return tokens, parents, target, draft, seed, offset


def _pad(req, D):
    """Pad a request of d <= D drafts to D (garbage in the padding: it must never be read)."""
    tokens, parents, target, draft, seed, offset = req
    d = tokens.shape[1]
    t = torch.full((1, D), 10**9, dtype=torch.int64)
    t[:, :d] = tokens
    p = torch.arange(-1, D, dtype=torch.int32)[None].clone()
    p[:, : d + 1] = parents
    tp = torch.full((1, D + 1, V), float("nan"))
    tp[:, : d + 1] = target
    dp = torch.full((1, D, V), -1.0)
    dp[:, :d] = draft
    return t, p, tp, dp, seed, offset


def _batch(reqs, D):
    """Stack requests (each padded to D drafts) into one batch with draft_lens."""
    padded = [_pad(r, D) for r in reqs]
    cols = [torch.cat(c, 0).contiguous() for c in zip(*padded)]
    return (*cols, torch.tensor([r[0].shape[1] for r in reqs], dtype=torch.int32))


def _sample(batch, wor=False):
    tokens, parents, target, draft, seed, offset, lens = batch
    return ops.verify_sample(tokens, parents, target, draft, seed, offset, wor, lens, tokens.shape[1])


def _block(batch):
    tokens, _, target, draft, seed, offset, lens = batch
    return ops.verify_block(tokens, target, draft, seed, offset, lens)


def _row(out, b):
    return tuple(t[b : b + 1] for t in out)


@pytest.mark.parametrize("op", ["sample", "sample_wor", "block"])
def test_a_request_gets_the_same_verdict_at_every_position_among_any_neighbours(op):
    """200 placements of one request (position 0..B-1 of batches of 1..12 random neighbours of
    other lengths, trees and streams) all give its verdict alone: vLLM's per-request generators
    have this property; one (seed, offset) per call reproduced it in 8 of 200."""
    g = torch.Generator().manual_seed({"sample": 1, "sample_wor": 2, "block": 3}[op])
    kind = "chain" if op == "block" else "tree"
    run = {"sample": _sample, "sample_wor": lambda b: _sample(b, True), "block": _block}[op]
    D = 7
    me = _request(g, 5, kind)
    pool = [_request(g, d % (D + 1), kind) for d in range(48)]
    alone = run(_batch([me], D))
    verdicts = set()
    for placement in range(200):
        B = int(torch.randint(1, 13, (1,), generator=g))
        pos = placement % B
        others = [pool[int(i)] for i in torch.randint(0, len(pool), (B - 1,), generator=g)]
        out = run(_batch(others[:pos] + [me] + others[pos:], D))
        _equal(_row(out, pos), alone)
        verdicts.add(tuple(int(t[pos].flatten()[0]) for t in out))
    assert len(verdicts) == 1


@pytest.mark.parametrize("op", ["sample", "block"])
def test_the_stream_is_the_requests_own(op):
    """The same drafts under other (seed, offset) pairs give other verdicts: the streams are used."""
    g = torch.Generator().manual_seed(4)
    run = _sample if op == "sample" else _block
    me = _request(g, 6, "chain")
    copies = []
    for k in range(64):
        tokens, parents, target, draft, _, _ = me
        copies.append((tokens, parents, target, draft, torch.tensor([k // 8]), torch.tensor([k % 8])))
    out = run(_batch(copies, 6))
    assert len({(int(a), int(b)) for a, b in zip(out[0], out[-1])}) > 4


def test_python_ints_broadcast_like_per_request_tensors(gen, random_parents, distributions, draw_tokens, per_draft):
    B, N, V_ = 9, 6, 50
    parents = random_parents(gen, B, N, "tree")
    target, rows = distributions(gen, B, N, V_)
    tokens, draft = draw_tokens(gen, parents, rows)[:, 1:].contiguous(), per_draft(rows, parents)
    for seed, offset in [(5, 9), (-1, 2**64 - 3), (2**63, 0)]:
        s = torch.full((B,), ops._u64("seed", seed), dtype=torch.int64)
        o = torch.full((B,), ops._u64("offset", offset), dtype=torch.int64)
        _equal(ops.verify_sample(tokens, parents, target, draft, seed, offset),
               ops.verify_sample(tokens, parents, target, draft, s, o))
        _equal(ops.verify_sample(tokens, parents, target, draft, seed, o),
               ops.verify_sample(tokens, parents, target, draft, s, offset))
    chain = random_parents(gen, B, N, "chain")
    tokens, draft = draw_tokens(gen, chain, rows)[:, 1:].contiguous(), rows[:, : N - 1].contiguous()
    _equal(ops.verify_block(tokens, target, draft, 3, 4),
           ops.verify_block(tokens, target, draft, torch.full((B,), 3), torch.full((B,), 4)))


@pytest.mark.parametrize("wor", [False, True])
def test_int32_token_ids_give_the_int64_results(gen, random_parents, distributions, draw_tokens, per_draft, wor):
    B, N, V_ = 17, 9, 3000
    parents = random_parents(gen, B, N, "tree")
    target, rows = distributions(gen, B, N, V_, agreement=0.9)
    tokens, draft = draw_tokens(gen, parents, rows)[:, 1:].contiguous(), per_draft(rows, parents)
    seed, lens = torch.arange(B) * 1000003, torch.randint(0, N, (B,), generator=gen)
    _equal(ops.verify_sample(tokens.int(), parents, target, draft, seed, 1, wor, lens),
           ops.verify_sample(tokens, parents, target, draft, seed, 1, wor, lens))
    chain = random_parents(gen, B, N, "chain")
    tokens, draft = draw_tokens(gen, chain, rows)[:, 1:].contiguous(), rows[:, : N - 1].contiguous()
    _equal(ops.verify_block(tokens.int(), target, draft, seed, 2, lens.int()),
           ops.verify_block(tokens, target, draft, seed, 2, lens))


@pytest.mark.parametrize("op", ["sample", "block"])
def test_a_ragged_batch_verifies_each_request_as_it_would_alone(op):
    """draft_lens [B]: request b's verdict equals the op run on it alone with exactly its d drafts."""
    g = torch.Generator().manual_seed(7)
    D = 8
    kind = "chain" if op == "block" else "tree"
    reqs = [_request(g, d, kind) for d in [0, 8, 3, 1, 5, 8, 2, 0, 6]]
    out = _sample(_batch(reqs, D)) if op == "sample" else _block(_batch(reqs, D))
    for b, (tokens, parents, target, draft, seed, offset) in enumerate(reqs):
        if op == "sample":
            alone = ops.verify_sample(tokens, parents, target, draft, seed, offset, max_depth=D)
        else:
            alone = ops.verify_block(tokens, target, draft, seed, offset)
        _equal(_row(out, b), alone)


def test_one_draft_block_verification_is_token_wise_on_the_same_uniform(gen, distributions):
    """D = 1: h_1 = w_1 = min(1, p/q), so block accepts iff eta_1 <= p/q and token-wise iff
    u * q < p; both draw uniform(seed, offset, 1, 0), so they agree request by request."""
    B = 4000
    target, draft = distributions(gen, B, 2, 31, agreement=0.5)
    tokens = torch.multinomial(draft[:, 0], 1, generator=gen)
    draft = draft[:, :1].contiguous()
    seed = torch.randint(-2**63, 2**63 - 1, (B,), generator=gen)
    chain = torch.tensor([[-1, 0]] * B, dtype=torch.int32)
    sample_len = ops.verify_sample(tokens, chain, target, draft, seed, 0)[0]
    block_len = ops.verify_block(tokens, target, draft, seed, 0)[0]
    assert 0.2 < float(sample_len.float().mean()) < 0.9  # both outcomes occur
    assert torch.equal(sample_len, block_len)
