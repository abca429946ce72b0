"""Sanitizer driver for trtspec::verify_block (see cases.py): chains of D = N - 1 drafts (D = 0
included), a repeat of every call (same seed: same outputs), NaN / negative probabilities (outputs
must stay in range on CUDA; the CPU rejects them) and the invalid-request verdict for a draft
token outside [0, V) (accepted_len 0, bonus -1)."""
from __future__ import annotations

import sys

from cases import main, probs

SEED, OFFSET = 99, 3


def invalid_verdict(out, b):
    acc, bonus = out
    assert int(acc[b]) == 0 and int(bonus[b]) == -1, f"request {b}: got accepted_len {int(acc[b])}, bonus {int(bonus[b])}"


def inputs(d, B, D, V):
    """Drafts drawn from their draft rows; target rows close to them (long accepted prefixes)."""
    import torch

    draft = probs(d.g, (B, D, V))
    target = probs(d.g, (B, D + 1, V))
    if D:
        target[:, :D] = (0.7 * draft + 0.3 * target[:, :D]).contiguous()
        x = torch.multinomial(draft.reshape(-1, V), 1, generator=d.g).reshape(B, D)
    else:
        x = torch.zeros(B, 0, dtype=torch.int64)
    return x, target.contiguous(), draft


def in_range(out, D, V, rows):
    acc, bonus = out
    for b in rows:
        assert 0 <= int(acc[b]) <= D, f"request {b}: accepted_len {int(acc[b])} outside [0, {D}]"
        assert 0 <= int(bonus[b]) < V, f"request {b}: bonus {int(bonus[b])} outside [0, {V})"


def run(d):
    for B, N, V in d.shapes():
        D = N - 1
        x, target, draft = inputs(d, B, D, V)
        with d.case(f"B={B} D={D} V={V}"):
            out = d.call(x, target, draft, SEED, OFFSET)
            in_range(out, D, V, range(B))
            d.same(d.call(x, target, draft, SEED, OFFSET), out, "repeat")
        good = d.call(x, target, draft, SEED, OFFSET)
        b = B // 2
        if D:
            for value, what in ((V, "token == V"), (-1, "negative token")):
                bad = x.clone()
                bad[b, D - 1] = value
                with d.case(f"B={B} D={D} V={V} {what}"):
                    d.bad_data(d.dev(bad, target, draft, SEED, OFFSET), [b], invalid_verdict, good)
        for fill, what in ((float("nan"), "NaN"), (-0.5, "negative")):
            bad_t = target.clone()
            bad_t[b, :] = fill
            with d.case(f"B={B} D={D} V={V} {what} target rows"):
                args = d.dev(x, bad_t, draft, SEED, OFFSET)
                if d.cuda:
                    acc, bonus = d.call(*args)
                    assert 0 <= int(acc[b]) <= D and -1 <= int(bonus[b]) < V
                    keep = [i for i in range(B) if i != b]
                    d.same([acc[keep], bonus[keep]], [o[keep] for o in good], "untouched request")
                else:
                    d.bad_data(args, [b], invalid_verdict)


if __name__ == "__main__":
    sys.exit(main("verify_block", run))
