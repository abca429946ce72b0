"""Sanitizer driver for trtspec::verify_greedy (see cases.py): float32 / float16 / bfloat16 logits
(small integers, so many ties), chains, stars, trees, ragged num_nodes, NaN logits, a max_depth
too small for the accepted path, and the invalid-request verdict (accepted_len 0, nodes -1, bonus -1)."""
from __future__ import annotations

import sys

from cases import KINDS, greedy_tokens, main, num_nodes, parents


def invalid_verdict(out, b):
    acc, nodes, bonus = out
    assert int(acc[b]) == 0 and int(bonus[b]) == -1, f"request {b}: got accepted_len {int(acc[b])}, bonus {int(bonus[b])}"
    assert (nodes[b] == -1).all(), f"request {b}: accepted_nodes not -1"


def inputs(d, B, N, V, kind, dtype):
    import torch

    p = parents(d.g, B, N, kind)
    logits = torch.randint(-3, 4, (B, N, V), generator=d.g).to(dtype)
    return greedy_tokens(d.g, p, logits), p, logits


def run(d):
    import torch

    dtypes = (torch.float32, torch.float16, torch.bfloat16) if d.sizes == "full" else (torch.float32, torch.bfloat16)
    for B, N, V in d.shapes():
        for kind in KINDS:
            for dtype in dtypes:
                tok, p, logits = inputs(d, B, N, V, kind, dtype)
                nn = num_nodes(d.g, B, N) if kind == "tree" else None
                with d.case(f"B={B} N={N} V={V} {kind} {dtype}"):
                    d.same(d.call(tok, p, logits, nn, None), d.reference(tok, p, logits, nn, None))
        tok, p, logits = inputs(d, B, N, V, "chain", torch.float32)
        logits.view(-1)[:: 7 * V + 3] = float("nan")  # NaN counts as the maximum, as in torch.argmax
        with d.case(f"B={B} N={N} V={V} NaN logits"):
            d.same(d.call(tok, p, logits, None, None), d.reference(tok, p, logits, None, None))
        good = d.reference(tok, p, logits, None, None)
        b = B // 2
        if N > 1:
            for value, what in ((V, "token == V"), (-1, "negative token")):
                bad = tok.clone()
                bad[b, 1] = value
                with d.case(f"B={B} N={N} V={V} {what}"):
                    d.bad_data(d.dev(bad, p, logits, None, None), [b], invalid_verdict, good)
            bad = p.clone()
            bad[b, N - 1] = N - 1
            with d.case(f"B={B} N={N} V={V} parent == its own index"):
                d.bad_data(d.dev(tok, bad, logits, None, None), [b], invalid_verdict, good)
        for value in (0, N + 1):
            nn = torch.full((B,), N, dtype=torch.int32)
            nn[b] = value
            with d.case(f"B={B} N={N} V={V} num_nodes={value}"):
                d.bad_data(d.dev(tok, p, logits, nn, None), [b], invalid_verdict, good)
        if d.cuda and int(good[0].max()) > 0:
            with d.case(f"B={B} N={N} V={V} max_depth=0 with longer accepted paths"):
                acc, nodes, bonus = d.call(tok, p, logits, None, 0)
                long = good[0] > 0
                assert nodes.shape == (B, 1), f"accepted_nodes shape {tuple(nodes.shape)}"
                assert (acc[long] == 0).all() and (bonus[long] == -1).all() and (nodes[long] == -1).all()
                assert torch.equal(acc[~long], good[0][~long]) and torch.equal(bonus[~long], good[2][~long])
                assert torch.equal(nodes[~long, 0], good[1][~long, 0])


if __name__ == "__main__":
    sys.exit(main("verify_greedy", run))
