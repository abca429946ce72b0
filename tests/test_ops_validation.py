"""Bad input: every rule raises before launch, naming the argument and what was expected.

The Python wrappers raise ValueError; direct torch.ops.trtspec.* calls raise RuntimeError from
the C++ checks (op name + kernel status), and never read or write out of bounds.
"""
from __future__ import annotations

import pytest
import torch

from trtspec import ops

B, N, V, D = 2, 4, 10, 3


def _chain(b=B, n=N):
    return torch.arange(-1, n - 1, dtype=torch.int32).repeat(b, 1)


def _probs(*shape):
    return torch.full(shape, 1.0 / shape[-1])


def _greedy(**kw):
    args = dict(tokens=torch.ones(B, N, dtype=torch.int64), parents=_chain(), target_logits=torch.randn(B, N, V))
    args.update(kw)
    return lambda: ops.verify_greedy(**args)


def _sample(**kw):
    args = dict(draft_tokens=torch.ones(B, N - 1, dtype=torch.int64), parents=_chain(), target_probs=_probs(B, N, V),
                draft_probs=_probs(B, N - 1, V), seed=1, offset=2)
    args.update(kw)
    return lambda: ops.verify_sample(**args)


def _block(**kw):
    args = dict(draft_tokens=torch.ones(B, D, dtype=torch.int64), target_probs=_probs(B, D + 1, V),
                draft_probs=_probs(B, D, V), seed=1, offset=2)
    args.update(kw)
    return lambda: ops.verify_block(**args)


def _kv(**kw):
    args = dict(accepted_nodes=torch.tensor([[0, 1, 2], [0, -1, -1]], dtype=torch.int32),
                accepted_len=torch.tensor([2, 0], dtype=torch.int32), cache_lens=torch.tensor([5, 9], dtype=torch.int32))
    args.update(kw)
    return lambda: ops.accepted_kv_indices(**args)


def _with(t, index, value):
    t = t.clone()
    t[index] = value
    return t


CASES = {
    # tree_metadata / the tree checks shared by every tree op
    "parents_not_tensor": (lambda: ops.tree_metadata([[-1, 0]]), r"parents must be a torch.Tensor"),
    "parents_dims": (lambda: ops.tree_metadata(torch.tensor([-1, 0])), r"parents must have 2 dimensions"),
    "parents_dtype": (lambda: ops.tree_metadata(_chain().float()), r"parents must have dtype int32 or int64"),
    "parents_contiguous": (lambda: ops.tree_metadata(_chain(4, 4).t()), r"parents must be contiguous"),
    "parents_device": (lambda: ops.tree_metadata(_chain().to("meta")), r"parents must be on a CPU or CUDA device"),
    "parents_root": (lambda: ops.tree_metadata(_with(_chain(), (1, 0), 0)), r"parents\[1, 0\] must be -1"),
    "parents_not_topological": (lambda: ops.tree_metadata(_with(_chain(), (1, 2), 2)), r"parents\[1, 2\] must be in \[0, 2\)"),
    "parents_negative": (lambda: ops.tree_metadata(_with(_chain(), (0, 3), -1)), r"parents\[0, 3\] must be in \[0, 3\)"),
    "nodes_past_limit": (lambda: ops.tree_metadata(_chain(1, ops.MAX_NODES + 1)), r"parents.shape\[1\] \(N.*\[1, 4096\]"),
    "num_nodes_zero": (lambda: ops.tree_metadata(_chain(), torch.tensor([0, 2])), r"num_nodes\[0\] must be in \[1, N=4\]"),
    "num_nodes_past_n": (lambda: ops.tree_metadata(_chain(), torch.tensor([4, 5])), r"num_nodes\[1\] must be in \[1, N=4\]"),
    "num_nodes_shape": (lambda: ops.tree_metadata(_chain(), torch.tensor([1, 2, 3])), r"num_nodes must have shape \(2,\)"),
    "num_nodes_device": (lambda: ops.tree_metadata(_chain(), torch.tensor([1, 2], device="meta")), r"num_nodes must be on cpu"),
    # verify_greedy
    "tokens_dtype": (_greedy(tokens=torch.ones(B, N, dtype=torch.int32)), r"tokens must have dtype int64"),
    "tokens_shape": (_greedy(tokens=torch.ones(B, N + 1, dtype=torch.int64)), r"tokens must have shape \(2, 4\)"),
    "tokens_past_vocab": (_greedy(tokens=_with(torch.ones(B, N, dtype=torch.int64), (1, 2), V)), r"tokens\[1, 2\] must be a token id in \[0, V=10\)"),
    "tokens_negative": (_greedy(tokens=_with(torch.ones(B, N, dtype=torch.int64), (0, 1), -3)), r"tokens\[0, 1\] must be a token id"),
    "logits_dtype": (_greedy(target_logits=torch.randn(B, N, V, dtype=torch.float64)), r"target_logits must have dtype float32 or float16 or bfloat16"),
    "logits_shape": (_greedy(target_logits=torch.randn(B, N - 1, V)), r"target_logits must have shape \(2, 4, V\)"),
    "logits_empty_vocab": (_greedy(target_logits=torch.randn(B, N, 0)), r"target_logits must have shape .* V >= 1"),
    "logits_device": (_greedy(target_logits=torch.randn(B, N, V, device="meta")), r"target_logits must be on cpu"),
    "tree_deeper_than_max_depth": (_greedy(max_depth=2), r"depth 3, deeper than max_depth=2"),
    "max_depth_range": (_greedy(max_depth=ops.MAX_NODES), r"max_depth must be in \[0, 4095\]"),
    "max_depth_type": (_greedy(max_depth=2.0), r"max_depth must be an int"),
    # verify_sample
    "target_probs_nan": (_sample(target_probs=_with(_probs(B, N, V), (1, 2, 3), float("nan"))), r"target_probs\[1, 2\] has a NaN, Inf or negative"),
    "target_probs_inf": (_sample(target_probs=_with(_probs(B, N, V), (0, 0, 0), float("inf"))), r"target_probs\[0, 0\] has a NaN, Inf or negative"),
    "draft_probs_negative": (_sample(draft_probs=_with(_probs(B, N - 1, V), (0, 1, 0), -0.1)), r"draft_probs\[0, 1\] has a NaN, Inf or negative"),
    "target_probs_row_sum": (_sample(target_probs=_with(_probs(B, N, V), (1, 3, 0), 0.2)), r"target_probs\[1, 3\] sums to 1.1; each row must sum to 1 within 0.001"),
    "draft_probs_row_sum": (_sample(draft_probs=_probs(B, N - 1, V) * 0.99), r"draft_probs\[0, 0\] sums to 0.99"),
    "target_probs_dtype": (_sample(target_probs=_probs(B, N, V).double()), r"target_probs must have dtype float32"),
    "target_probs_shape": (_sample(target_probs=_probs(B, N - 1, V)), r"target_probs must have shape \(2, 4, V\) \[B, D \+ 1, V\]"),
    "draft_probs_shape": (_sample(draft_probs=_probs(B, N - 1, V + 1)), r"draft_probs must have shape \(2, 3, 10\)"),
    "draft_probs_node_layout": (_sample(draft_probs=_probs(B, N, V)), r"draft_probs must have shape \(2, 3, 10\) \[B, D, V\]"),
    "sample_tokens_past_vocab": (_sample(draft_tokens=_with(torch.ones(B, N - 1, dtype=torch.int64), (0, 2), 10)), r"draft_tokens\[0, 2\] must be a token id in \[0, V=10\)"),
    "sample_tokens_dtype": (_sample(draft_tokens=torch.ones(B, N - 1)), r"draft_tokens must have dtype int32 or int64, got float32"),
    "sample_tokens_dims": (_sample(draft_tokens=torch.ones(N - 1, dtype=torch.int64)), r"draft_tokens must have 2 dimensions \[B, D\]"),
    "sample_parents_shape": (_sample(parents=_chain(B, N + 1)), r"parents must have shape \(2, 4\) \[B, D \+ 1\]"),
    "sample_parents_not_topological": (_sample(parents=_with(_chain(), (0, 2), 2)), r"parents\[0, 2\] must be in \[0, 2\)"),
    "seed_type": (_sample(seed=1.5), r"seed must be an int"),
    "offset_bool": (_sample(offset=True), r"offset must be an int, got bool"),
    "seed_tensor_dtype": (_sample(seed=torch.ones(B, dtype=torch.int32)), r"seed must have dtype int64, got int32"),
    "seed_tensor_shape": (_sample(seed=torch.ones(B + 1, dtype=torch.int64)), r"seed must have shape \(2,\) \[B\], got \(3,\)"),
    "seed_tensor_dims": (_sample(seed=torch.tensor(3)), r"seed must have 1 dimensions \[B\], got shape \(\)"),
    "offset_tensor_device": (_sample(offset=torch.ones(B, dtype=torch.int64, device="meta")), r"offset must be on cpu"),
    "offset_tensor_contiguous": (_sample(offset=torch.ones(B, 2, dtype=torch.int64)[:, 0]), r"offset must be contiguous"),
    "sample_draft_lens_range": (_sample(draft_lens=torch.tensor([3, 4])), r"draft_lens\[1\] must be in \[0, D=3\], got 4"),
    "sample_draft_lens_negative": (_sample(draft_lens=torch.tensor([-1, 0])), r"draft_lens\[0\] must be in \[0, D=3\], got -1"),
    "sample_draft_lens_shape": (_sample(draft_lens=torch.tensor([1])), r"draft_lens must have shape \(2,\) \[B\]"),
    "sample_draft_lens_dtype": (_sample(draft_lens=torch.tensor([1.0, 2.0])), r"draft_lens must have dtype int32 or int64"),
    "sample_max_depth": (_sample(max_depth=1), r"depth 3, deeper than max_depth=1"),
    "without_replacement_type": (_sample(siblings_without_replacement=1), r"siblings_without_replacement must be a bool"),
    # verify_block
    "draft_len_past_limit": (_block(draft_tokens=torch.ones(1, ops.MAX_BLOCK_DRAFT + 1, dtype=torch.int64)), r"draft_tokens.shape\[1\] \(D\) must be <= 1024"),
    "block_target_shape": (_block(target_probs=_probs(B, D, V)), r"target_probs must have shape \(2, 4, V\)"),
    "block_draft_shape": (_block(draft_probs=_probs(B, D + 1, V)), r"draft_probs must have shape \(2, 3, 10\)"),
    "block_tokens_past_vocab": (_block(draft_tokens=_with(torch.ones(B, D, dtype=torch.int64), (1, 2), 11)), r"draft_tokens\[1, 2\] must be a token id in \[0, V=10\)"),
    "block_draft_nan": (_block(draft_probs=_with(_probs(B, D, V), (1, 1, 1), float("nan"))), r"draft_probs\[1, 1\] has a NaN"),
    "block_target_row_sum": (_block(target_probs=_with(_probs(B, D + 1, V), (0, 3, 9), 0.0)), r"target_probs\[0, 3\] sums to 0.9"),
    "block_tokens_dtype": (_block(draft_tokens=torch.ones(B, D)), r"draft_tokens must have dtype int32 or int64"),
    "block_draft_lens_range": (_block(draft_lens=torch.tensor([0, 4], dtype=torch.int32)), r"draft_lens\[1\] must be in \[0, D=3\], got 4"),
    "block_draft_lens_device": (_block(draft_lens=torch.tensor([0, 1], device="meta")), r"draft_lens must be on cpu"),
    "block_seed_shape": (_block(seed=torch.zeros(1, dtype=torch.int64)), r"seed must have shape \(2,\) \[B\]"),
    "block_offset_type": (_block(offset="7"), r"offset must be an int, got str"),
    # accepted_kv_indices
    "accepted_len_range": (_kv(accepted_len=torch.tensor([3, 0])), r"accepted_len\[0\] must be in \[0, L-1=2\]"),
    "accepted_len_negative": (_kv(accepted_len=torch.tensor([0, -1])), r"accepted_len\[1\] must be in \[0, L-1=2\]"),
    "cache_lens_negative": (_kv(cache_lens=torch.tensor([5, -1])), r"cache_lens\[1\] must be >= 0"),
    "cache_lens_overflow": (_kv(cache_lens=torch.tensor([2**31 - 2, 0], dtype=torch.int64)), r"cache_lens\[0\] must be >= 0 with cache_lens \+ accepted_len \+ 1 < 2\*\*31"),
    "accepted_nodes_negative": (_kv(accepted_nodes=torch.tensor([[0, -1, 2], [0, -1, -1]])), r"accepted_nodes\[0, 1\] must be >= 0"),
    "accepted_nodes_width": (_kv(accepted_nodes=torch.zeros(2, 0, dtype=torch.int32)), r"accepted_nodes.shape\[1\] \(L = max_depth \+ 1\) must be in \[1, 4096\]"),
    "accepted_len_shape": (_kv(accepted_len=torch.tensor([1])), r"accepted_len must have shape \(2,\)"),
    "cache_lens_dtype": (_kv(cache_lens=torch.tensor([5.0, 9.0])), r"cache_lens must have dtype int32 or int64"),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_validation_rule_raises_value_error_naming_the_argument(rule):
    call, message = CASES[rule]
    with pytest.raises(ValueError, match=message):
        call()


def test_padding_rows_are_not_validated():
    """Rows the op never reads (padding past draft_lens) may hold anything, tokens included."""
    target, draft = _probs(B, N, V), _probs(B, N - 1, V)
    target[1, 3] = float("nan")       # padding of request 1 (draft_lens 2)
    draft[1, 2] = 7.0                 # request 1's padding draft row
    tokens = _with(torch.ones(B, N - 1, dtype=torch.int64), (1, 2), 10**9)  # padding token
    out = ops.verify_sample(tokens, _chain(), target, draft, 3, 4, draft_lens=torch.tensor([3, 2]))
    assert out[0].shape == (B,)
    out = ops.verify_block(tokens, target, draft, 3, 4, draft_lens=torch.tensor([3, 2]))
    assert out[0].shape == (B,)


def test_later_sibling_rows_are_not_validated_without_replacement():
    """Without replacement only a first child's draft row is read: a later sibling's row may hold
    anything, and it is checked (and rejected) when siblings were drawn with replacement."""
    parents = torch.tensor([[-1, 0, 0, 1]] * B, dtype=torch.int32)   # node 2 is node 1's sibling
    draft = _with(_probs(B, N - 1, V), (0, 1), 5.0)                      # draft 1 = node 2
    args = (torch.ones(B, N - 1, dtype=torch.int64), parents, _probs(B, N, V), draft, 1, 2)
    assert ops.verify_sample(*args, True)[0].shape == (B,)
    with pytest.raises(ValueError, match=r"draft_probs\[0, 1\] sums to 50"):
        ops.verify_sample(*args, False)


def test_seed_and_offset_are_taken_modulo_2_64():
    a = _sample(seed=-1, offset=2**64 + 2)()
    b = _sample(seed=2**64 - 1, offset=2)()
    c = _sample(seed=torch.full((B,), -1, dtype=torch.int64), offset=torch.full((B,), 2, dtype=torch.int64))()
    for x, y, z in zip(a, b, c):
        assert torch.equal(x, y) and torch.equal(x, z)


# ---- direct torch.ops calls: RuntimeError from the C++ checks ------------------------------
def _s(b=B):
    return torch.arange(b, dtype=torch.int64)


DIRECT = {
    "int64_parents": (lambda: torch.ops.trtspec.tree_metadata(_chain().long()), r"trtspec::tree_metadata: parents must be Int"),
    "bad_tree": (lambda: torch.ops.trtspec.tree_metadata(_with(_chain(), (0, 2), 3)), r"trtspec::tree_metadata: invalid tree"),
    "num_nodes_range": (lambda: torch.ops.trtspec.tree_metadata(_chain(), torch.tensor([0, 4], dtype=torch.int32)), r"invalid tree"),
    "token_out_of_range": (lambda: torch.ops.trtspec.verify_greedy(_with(torch.ones(B, N, dtype=torch.int64), (0, 1), V), _chain(), torch.randn(B, N, V)), r"trtspec::verify_greedy: invalid token"),
    "too_deep": (lambda: torch.ops.trtspec.verify_greedy(torch.ones(B, N, dtype=torch.int64), _chain(), torch.randn(B, N, V), None, 1), r"trtspec::verify_greedy: tree too deep"),
    "logits_shape": (lambda: torch.ops.trtspec.verify_greedy(torch.ones(B, N, dtype=torch.int64), _chain(), torch.randn(B, N + 1, V)), r"trtspec::verify_greedy: target_logits.shape\[1\] must be 4"),
    "nan_probability": (lambda: torch.ops.trtspec.verify_sample(torch.ones(B, N - 1, dtype=torch.int64), _chain(), _with(_probs(B, N, V), (0, 0, 1), float("nan")), _probs(B, N - 1, V), _s(), _s()), r"trtspec::verify_sample: invalid probability"),
    "probs_noncontiguous": (lambda: torch.ops.trtspec.verify_sample(torch.ones(B, N - 1, dtype=torch.int64), _chain(), _probs(B, V, N).transpose(1, 2), _probs(B, N - 1, V), _s(), _s()), r"target_probs must be contiguous"),
    "sample_seed_shape": (lambda: torch.ops.trtspec.verify_sample(torch.ones(B, N - 1, dtype=torch.int64), _chain(), _probs(B, N, V), _probs(B, N - 1, V), _s(B + 1), _s()), r"trtspec::verify_sample: seed.shape\[0\] must be 2"),
    "sample_draft_lens_value": (lambda: torch.ops.trtspec.verify_sample(torch.ones(B, N - 1, dtype=torch.int64), _chain(), _probs(B, N, V), _probs(B, N - 1, V), _s(), _s(), False, torch.tensor([3, 4], dtype=torch.int32)), r"trtspec::verify_sample: invalid draft length"),
    "sample_tokens_dtype": (lambda: torch.ops.trtspec.verify_sample(torch.ones(B, N - 1, dtype=torch.int16), _chain(), _probs(B, N, V), _probs(B, N - 1, V), _s(), _s()), r"trtspec::verify_sample: draft_tokens must be Int or Long"),
    "block_token": (lambda: torch.ops.trtspec.verify_block(_with(torch.ones(B, D, dtype=torch.int64), (1, 0), -1), _probs(B, D + 1, V), _probs(B, D, V), _s(), _s()), r"trtspec::verify_block: invalid token"),
    "block_negative_prob": (lambda: torch.ops.trtspec.verify_block(torch.ones(B, D, dtype=torch.int32), _probs(B, D + 1, V), _with(_probs(B, D, V), (0, 0, 1), -1.0), _s(), _s()), r"trtspec::verify_block: invalid probability"),
    "block_offset_dtype": (lambda: torch.ops.trtspec.verify_block(torch.ones(B, D, dtype=torch.int64), _probs(B, D + 1, V), _probs(B, D, V), _s(), _s().int()), r"trtspec::verify_block: offset must be Long"),
    "block_draft_lens_value": (lambda: torch.ops.trtspec.verify_block(torch.ones(B, D, dtype=torch.int64), _probs(B, D + 1, V), _probs(B, D, V), _s(), _s(), torch.tensor([-1, 0], dtype=torch.int32)), r"trtspec::verify_block: invalid draft length"),
    "kv_len": (lambda: torch.ops.trtspec.accepted_kv_indices(torch.zeros(B, 3, dtype=torch.int32), torch.tensor([3, 0], dtype=torch.int32), torch.zeros(B, dtype=torch.int32)), r"trtspec::accepted_kv_indices: invalid argument"),
}


@pytest.mark.parametrize("rule", sorted(DIRECT))
def test_direct_op_call_raises_runtime_error_with_op_name(rule):
    call, message = DIRECT[rule]
    with pytest.raises(RuntimeError, match=message):
        call()


def test_validate_false_still_checks_values_the_kernel_reads():
    target = _with(_probs(B, N, V), (0, 0, 1), float("nan"))  # p(x) of node 1's token, read by the accept test
    with pytest.raises(RuntimeError, match="invalid probability"):
        ops.verify_sample(torch.ones(B, N - 1, dtype=torch.int64), _chain(), target, _probs(B, N - 1, V), 1, 2,
                          validate=False)


def test_row_sums_pass_matches_float64_sums_and_flags_invalid_rows(gen):
    """The fused C++ pass behind the probability checks: float64 row sums, NaN on an invalid row,
    1 on an unselected row."""
    probs = torch.rand(3, 5, 1001, generator=gen)
    probs[0, 1, 7] = float("nan")
    probs[1, 2, 1000] = -1e-30
    probs[2, 4, 0] = float("inf")
    rows = torch.ones(3, 5, dtype=torch.bool)
    rows[2, 3] = False
    out = torch.ops.trtspec._row_sums(probs, rows)
    expected = probs.double().sum(-1)
    bad = torch.zeros(3, 5, dtype=torch.bool)
    bad[0, 1] = bad[1, 2] = bad[2, 4] = True
    assert torch.equal(torch.isnan(out), bad)
    keep = ~bad & rows
    assert torch.allclose(out[keep], expected[keep], rtol=1e-12, atol=0)
    assert float(out[2, 3]) == 1.0
