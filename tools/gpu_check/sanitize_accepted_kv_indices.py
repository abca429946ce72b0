"""Sanitizer driver for trtspec::accepted_kv_indices (see cases.py): accepted paths from
verify_greedy on chains and trees, and the invalid-request verdict (src = dst = -1,
new_cache_lens = cache_lens) for an accepted_len outside [0, L-1], a negative cache length, a
negative accepted node and a position past INT32_MAX."""
from __future__ import annotations

import sys

from cases import greedy_tokens, main, parents

INT32_MAX = 2**31 - 1


def verdict(cache_lens):
    def check(out, b):
        src, dst, new = out
        assert (src[b] == -1).all() and (dst[b] == -1).all(), f"request {b}: src/dst not -1"
        assert int(new[b]) == int(cache_lens[b]), f"request {b}: new_cache_lens {int(new[b])} != {int(cache_lens[b])}"
    return check


def paths(d, B, N, kind):
    """(accepted_nodes [B, N] int32, accepted_len [B] int32) from the CPU verify_greedy."""
    import torch

    p = parents(d.g, B, N, kind)
    logits = torch.randint(-3, 4, (B, N, 13), generator=d.g).float()
    acc, nodes, _ = torch.ops.trtspec.verify_greedy(greedy_tokens(d.g, p, logits, 0.9), p, logits, None, None)
    return nodes, acc


def run(d):
    import torch

    for B, N, _ in d.shapes(distinct_bn=True):
        for kind in ("chain", "tree"):
            nodes, acc = paths(d, B, N, kind)
            cache = torch.randint(0, 5000, (B,), generator=d.g, dtype=torch.int32)
            with d.case(f"B={B} L={N} {kind}"):
                d.same(d.call(nodes, acc, cache), d.reference(nodes, acc, cache))
        nodes, acc = paths(d, B, N, "chain")
        cache = torch.randint(0, 5000, (B,), generator=d.g, dtype=torch.int32)
        good = d.reference(nodes, acc, cache)
        b = B // 2
        for value in (N, -1):
            bad = acc.clone()
            bad[b] = value
            with d.case(f"B={B} L={N} accepted_len={value}"):
                d.bad_data(d.dev(nodes, bad, cache), [b], verdict(cache), good)
        bad = cache.clone()
        bad[b] = -1
        with d.case(f"B={B} L={N} cache_lens=-1"):
            d.bad_data(d.dev(nodes, acc, bad), [b], verdict(bad), good)
        bad = nodes.clone()
        bad[b, 0] = -1
        with d.case(f"B={B} L={N} negative accepted node"):
            d.bad_data(d.dev(bad, acc, cache), [b], verdict(cache), good)
        bad = cache.clone()
        bad[b] = INT32_MAX - int(acc[b])
        with d.case(f"B={B} L={N} position past INT32_MAX"):
            d.bad_data(d.dev(nodes, acc, bad), [b], verdict(bad), good)


if __name__ == "__main__":
    sys.exit(main("accepted_kv_indices", run))
