"""Sanitizer driver for trtspec::tree_metadata (see cases.py): chains, stars and random trees,
ragged num_nodes, and the invalid-request verdict (mask 0, depth / first_child / next_sibling -1)."""
from __future__ import annotations

import sys

from cases import KINDS, main, num_nodes, parents


def invalid_verdict(out, b):
    mask, depth, first_child, next_sibling = out
    assert (mask[b] == 0).all(), f"request {b}: mask not cleared"
    for name, t in (("depth", depth), ("first_child", first_child), ("next_sibling", next_sibling)):
        assert (t[b] == -1).all(), f"request {b}: {name} not -1"


def run(d):
    for B, N, _ in d.shapes(distinct_bn=True):
        for kind in KINDS:
            p = parents(d.g, B, N, kind)
            for ragged in (False, True):
                nn = num_nodes(d.g, B, N) if ragged else None
                with d.case(f"B={B} N={N} {kind} ragged={ragged}"):
                    d.same(d.call(p, nn), d.reference(p, nn))
        p = parents(d.g, B, N, "tree")
        good = d.reference(p, None)
        b = B // 2
        bad_root = p.clone()
        bad_root[b, 0] = 0
        with d.case(f"B={B} N={N} bad root"):
            d.bad_data(d.dev(bad_root, None), [b], invalid_verdict, good)
        if N > 1:
            for value, what in ((N - 1, "parent after its child"), (-5, "negative parent")):
                bad = p.clone()
                bad[b, 1] = value
                with d.case(f"B={B} N={N} {what}"):
                    d.bad_data(d.dev(bad, None), [b], invalid_verdict, good)
        for value in (0, N + 1):
            nn = num_nodes(d.g, B, N)
            ok = d.reference(p, nn)
            nn[b] = value
            with d.case(f"B={B} N={N} num_nodes={value}"):
                d.bad_data(d.dev(p, nn), [b], invalid_verdict, ok)


if __name__ == "__main__":
    sys.exit(main("tree_metadata", run))
