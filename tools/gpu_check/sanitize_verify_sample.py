"""Sanitizer driver for trtspec::verify_sample (see cases.py): chains, stars, trees, ragged
num_nodes, siblings with and without replacement, a repeat of every call (same seed: same
outputs), NaN / negative probabilities (outputs must stay in range on CUDA; the CPU rejects them)
and the invalid-request verdict (accepted_len 0, nodes -1, bonus -1)."""
from __future__ import annotations

import sys

from cases import KINDS, check_path, main, num_nodes, parents, probs

SEED, OFFSET = 1234, 7


def invalid_verdict(out, b):
    acc, nodes, bonus = out
    assert int(acc[b]) == 0 and int(bonus[b]) == -1, f"request {b}: got accepted_len {int(acc[b])}, bonus {int(bonus[b])}"
    assert (nodes[b] == -1).all(), f"request {b}: accepted_nodes not -1"


def inputs(d, B, N, V, kind):
    """Children of node u drawn from draft row u (children follow the draft, so walks go deep)."""
    import torch

    p = parents(d.g, B, N, kind)
    target, draft = probs(d.g, (B, N, V)), probs(d.g, (B, N, V))
    rows = draft.gather(1, p.clamp(min=0).long()[..., None].expand(B, N, V)).reshape(-1, V)
    tok = torch.multinomial(rows, 1, generator=d.g).reshape(B, N)
    return tok, p, target, draft


def run(d):
    import torch

    for B, N, V in d.shapes():
        for kind in KINDS:
            for wor in (False, True):
                tok, p, target, draft = inputs(d, B, N, V, kind)
                nn = num_nodes(d.g, B, N) if kind == "tree" else None
                args = (tok, p, target, draft, SEED, OFFSET, wor, nn, None)
                with d.case(f"B={B} N={N} V={V} {kind} without_replacement={wor}"):
                    out = d.call(*args)
                    check_path(out, p, nn, V)
                    d.same(d.call(*args), out, "repeat")
        tok, p, target, draft = inputs(d, B, N, V, "tree")
        good = d.call(tok, p, target, draft, SEED, OFFSET, False, None, None)
        b = B // 2
        if N > 1:
            for value, what in ((V, "token == V"), (-3, "negative token")):
                bad = tok.clone()
                bad[b, N - 1] = value
                with d.case(f"B={B} N={N} V={V} {what}"):
                    d.bad_data(d.dev(bad, p, target, draft, SEED, OFFSET, False, None, None), [b], invalid_verdict,
                               good)
            bad = p.clone()
            bad[b, 1] = 1
            with d.case(f"B={B} N={N} V={V} parent == its own index"):
                d.bad_data(d.dev(tok, bad, target, draft, SEED, OFFSET, False, None, None), [b], invalid_verdict,
                           good)
        for value in (0, N + 1):
            nn = torch.full((B,), N, dtype=torch.int32)
            nn[b] = value
            with d.case(f"B={B} N={N} V={V} num_nodes={value}"):
                d.bad_data(d.dev(tok, p, target, draft, SEED, OFFSET, False, nn, None), [b], invalid_verdict, good)
        for fill, what in ((float("nan"), "NaN"), (-0.5, "negative")):
            bad_t = target.clone()
            bad_t[b, 0] = fill  # the root row is always read
            with d.case(f"B={B} N={N} V={V} {what} target row"):
                args = d.dev(tok, p, bad_t, draft, SEED, OFFSET, False, None, None)
                if d.cuda:
                    acc, nodes, bonus = d.call(*args)
                    assert 0 <= int(acc[b]) < nodes.shape[1] and -1 <= int(bonus[b]) < V
                    keep = [i for i in range(B) if i != b]
                    d.same([acc[keep], nodes[keep], bonus[keep]], [o[keep] for o in good], "untouched request")
                else:
                    d.bad_data(args, [b], invalid_verdict)


if __name__ == "__main__":
    sys.exit(main("verify_sample", run))
