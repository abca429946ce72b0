"""Sanitizer driver for trtspec::verify_sample (see cases.py), in the sampled ops' layout: draft
tokens [B, D] (int64 and int32), parents [B, D + 1], target rows [B, D + 1, V], draft rows [B, D, V]
(row j: the distribution draft j was drawn from), per-request seed / offset [B], ragged draft_lens.

Cases: chains, stars, trees, siblings with and without replacement; every call repeated (same
streams: same outputs), int32 tokens equal to int64, a permuted batch giving permuted outputs (each
request's verdict depends on its own stream only), a bad token in an unused draft (ignored), NaN /
negative probabilities (outputs must stay in range on CUDA; the CPU rejects them) and the
invalid-request verdict (accepted_len 0, nodes -1, bonus -1) for a used token outside [0, V), a
parent out of range and draft_lens outside [0, D]."""
from __future__ import annotations

import sys

from cases import KINDS, check_path, main, num_nodes, parents, probs


def invalid_verdict(out, b):
    acc, nodes, bonus = out
    assert int(acc[b]) == 0 and int(bonus[b]) == -1, f"request {b}: got accepted_len {int(acc[b])}, bonus {int(bonus[b])}"
    assert (nodes[b] == -1).all(), f"request {b}: accepted_nodes not -1"


def streams(B):
    import torch

    return torch.arange(B, dtype=torch.int64) * 7919 + 1, torch.full((B,), 7, dtype=torch.int64)


def inputs(d, B, N, V, kind):
    """Draft j (node j + 1) drawn from the draft row of its parent node, which is its row."""
    import torch

    p = parents(d.g, B, N, kind)
    target, node_q = probs(d.g, (B, N, V)), probs(d.g, (B, N, V))
    D = N - 1
    rows = node_q.gather(1, p[:, 1:].clamp(min=0).long()[..., None].expand(B, D, V)).contiguous()  # [B, D, V]
    x = torch.multinomial(rows.reshape(-1, V), 1, generator=d.g).reshape(B, D) if D else torch.zeros(B, 0).long()
    return x, p, target, rows


def run(d):
    import torch

    for B, N, V in d.shapes():
        D = N - 1
        seed, offset = streams(B)
        for kind in KINDS:
            for wor in (False, True):
                x, p, target, rows = inputs(d, B, N, V, kind)
                lens = (num_nodes(d.g, B, N) - 1) if kind == "tree" else None
                args = [x, p, target, rows, seed, offset, wor, lens, None]
                with d.case(f"B={B} D={D} V={V} {kind} without_replacement={wor}"):
                    out = d.call(*args)
                    check_path(out, p, None if lens is None else lens + 1, V)
                    d.same(d.call(*args), out, "repeat")
                    d.same(d.call(x.to(torch.int32), *args[1:]), out, "int32 draft tokens")
        x, p, target, rows = inputs(d, B, N, V, "tree")
        good = d.call(x, p, target, rows, seed, offset, False, None, None)
        if B > 1:
            perm = torch.randperm(B, generator=d.g)
            with d.case(f"B={B} D={D} V={V} permuted batch"):
                out = d.call(x[perm], p[perm], target[perm], rows[perm], seed[perm], offset[perm], False, None, None)
                d.same(out, [o[perm] for o in good], "permuted request")
        b = B // 2
        if D:
            for value, what in ((V, "token == V"), (-3, "negative token")):
                bad = x.clone()
                bad[b, D - 1] = value
                with d.case(f"B={B} D={D} V={V} {what}"):
                    d.bad_data(d.dev(bad, p, target, rows, seed, offset, False, None, None), [b], invalid_verdict, good)
                lens = torch.full((B,), D, dtype=torch.int32)
                lens[b] = D - 1
                with d.case(f"B={B} D={D} V={V} {what} in an unused draft"):
                    d.same(d.call(bad, p, target, rows, seed, offset, False, lens, None),
                           d.call(x, p, target, rows, seed, offset, False, lens, None), "unused draft")
            bad = p.clone()
            bad[b, 1] = 1
            with d.case(f"B={B} D={D} V={V} parent == its own index"):
                d.bad_data(d.dev(x, bad, target, rows, seed, offset, False, None, None), [b], invalid_verdict, good)
        for value in (-1, D + 1):
            lens = torch.full((B,), D, dtype=torch.int32)
            lens[b] = value
            with d.case(f"B={B} D={D} V={V} draft_lens={value}"):
                d.bad_data(d.dev(x, p, target, rows, seed, offset, False, lens, None), [b], invalid_verdict, good)
        for fill, what in ((float("nan"), "NaN"), (-0.5, "negative")):
            bad_t = target.clone()
            bad_t[b, 0] = fill  # the root row is always read
            with d.case(f"B={B} D={D} V={V} {what} target row"):
                args = d.dev(x, p, bad_t, rows, seed, offset, False, None, None)
                if d.cuda:
                    acc, nodes, bonus = d.call(*args)
                    assert 0 <= int(acc[b]) < nodes.shape[1] and -1 <= int(bonus[b]) < V
                    keep = [i for i in range(B) if i != b]
                    d.same([acc[keep], nodes[keep], bonus[keep]], [o[keep] for o in good], "untouched request")
                else:
                    d.bad_data(args, [b], invalid_verdict)


if __name__ == "__main__":
    sys.exit(main("verify_sample", run))
