"""Property tests of tree_metadata (hypothesis) and torch.library.opcheck of every op."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec import ops


@st.composite
def trees(draw):
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 80))
    rows = [[-1] + [draw(st.integers(0, i - 1)) for i in range(1, N)] for _ in range(B)]
    num_nodes = draw(st.none() | st.lists(st.integers(1, N), min_size=B, max_size=B))
    return torch.tensor(rows, dtype=torch.int32), (None if num_nodes is None else torch.tensor(num_nodes))


def _bits(row: torch.Tensor, N: int) -> set[int]:
    return {32 * w + j for w in range(row.numel()) for j in range(32) if (int(row[w]) >> j) & 1 and 32 * w + j < N}


@settings(max_examples=60, deadline=None)
@given(trees())
def test_tree_metadata_properties(tree):
    parents, num_nodes = tree
    B, N = parents.shape
    mask, depth, first_child, next_sibling = ops.tree_metadata(parents, num_nodes)
    for b in range(B):
        n = N if num_nodes is None else int(num_nodes[b])
        for i in range(n):
            bits = _bits(mask[b, i], N)
            assert len(bits) == int(depth[b, i]) + 1          # row i has depth[i] + 1 bits
            assert 0 in bits and i in bits                    # the root and i itself
            if i:
                p = int(parents[b, i])
                assert bits == _bits(mask[b, p], N) | {i}     # ancestors of i = ancestors of p + i
                assert int(depth[b, i]) == int(depth[b, p]) + 1
            # first_child / next_sibling enumerate exactly the children, in index order
            children, c = [], int(first_child[b, i])
            while c >= 0:
                children.append(c)
                c = int(next_sibling[b, c])
            assert children == [c for c in range(i + 1, n) if int(parents[b, c]) == i]
        for i in range(n, N):                                 # padding rows
            assert int(mask[b, i].abs().sum()) == 0 and int(depth[b, i]) == 0
            assert int(first_child[b, i]) == -1 and int(next_sibling[b, i]) == -1


def _opcheck_cases():
    g = torch.Generator().manual_seed(0)
    B, N, V, D = 3, 6, 11, 4
    parents = torch.tensor([[-1, 0, 0, 1, 2, 4]] * B, dtype=torch.int32)
    num_nodes = torch.tensor([6, 3, 1], dtype=torch.int32)
    tokens = torch.randint(0, V, (B, N), generator=g)
    probs = torch.softmax(torch.randn(B, N, V, generator=g), -1)
    draft = torch.softmax(torch.randn(B, N - 1, V, generator=g), -1)
    seeds, offsets = torch.tensor([3, -5, 2**62]), torch.tensor([0, 1, 2])
    block_tokens = torch.randint(0, V, (B, D), generator=g)
    block_target = torch.softmax(torch.randn(B, D + 1, V, generator=g), -1)
    block_draft = torch.softmax(torch.randn(B, D, V, generator=g), -1)
    kv_nodes = torch.tensor([[0, 1, 3, -1], [0, -1, -1, -1], [0, 2, -1, -1]], dtype=torch.int32)
    return {
        "tree_metadata": (torch.ops.trtspec.tree_metadata.default, (parents, num_nodes)),
        "verify_greedy": (torch.ops.trtspec.verify_greedy.default,
                          (tokens, parents, torch.randn(B, N, V, generator=g).half(), num_nodes, 5)),
        "verify_sample": (torch.ops.trtspec.verify_sample.default,
                          (tokens[:, 1:].int(), parents, probs, draft, seeds, offsets, True, num_nodes - 1, None)),
        "verify_block": (torch.ops.trtspec.verify_block.default,
                         (block_tokens, block_target, block_draft, seeds, offsets, torch.tensor([4, 0, 2], dtype=torch.int32))),
        "accepted_kv_indices": (torch.ops.trtspec.accepted_kv_indices.default,
                                (kv_nodes, torch.tensor([2, 0, 1], dtype=torch.int32),
                                 torch.tensor([10, 0, 7], dtype=torch.int32))),
    }


@pytest.mark.parametrize("name", sorted(_opcheck_cases()))
def test_opcheck(name):
    op, args = _opcheck_cases()[name]
    torch.library.opcheck(op, args)
