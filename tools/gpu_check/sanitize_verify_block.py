"""Sanitizer driver for trtspec::verify_block (see cases.py), in the sampled ops' layout: draft
tokens [B, D] (int64 and int32; D = N - 1, D = 0 included), target rows [B, D + 1, V], draft rows
[B, D, V], per-request seed / offset [B], ragged draft_lens.

Cases: every call repeated (same streams: same outputs), int32 tokens equal to int64, a permuted
batch giving permuted outputs, ragged draft_lens equal to each request verified alone, a bad token
in an unused draft (ignored), NaN / negative probabilities (outputs must stay in range on CUDA;
the CPU rejects them) and the invalid-request verdict (accepted_len 0, bonus -1) for a used token
outside [0, V) and draft_lens outside [0, D]."""
from __future__ import annotations

import sys

from cases import main, probs


def invalid_verdict(out, b):
    acc, bonus = out
    assert int(acc[b]) == 0 and int(bonus[b]) == -1, f"request {b}: got accepted_len {int(acc[b])}, bonus {int(bonus[b])}"


def streams(B):
    import torch

    return torch.arange(B, dtype=torch.int64) * 104729 + 3, torch.full((B,), 11, dtype=torch.int64)


def inputs(d, B, D, V):
    """Drafts drawn from their draft rows; target rows close to them (long accepted prefixes)."""
    import torch

    draft = probs(d.g, (B, D, V))
    target = probs(d.g, (B, D + 1, V))
    if D:
        target[:, :D] = 0.7 * draft + 0.3 * target[:, :D]
        x = torch.multinomial(draft.reshape(-1, V), 1, generator=d.g).reshape(B, D)
    else:
        x = torch.zeros(B, 0, dtype=torch.int64)
    return x, target.contiguous(), draft


def in_range(out, lens, V):
    acc, bonus = out
    for b in range(acc.shape[0]):
        assert 0 <= int(acc[b]) <= int(lens[b]), f"request {b}: accepted_len {int(acc[b])} outside [0, {int(lens[b])}]"
        assert 0 <= int(bonus[b]) < V, f"request {b}: bonus {int(bonus[b])} outside [0, {V})"


def run(d):
    import torch

    for B, N, V in d.shapes():
        D = N - 1
        seed, offset = streams(B)
        x, target, draft = inputs(d, B, D, V)
        full = torch.full((B,), D, dtype=torch.int32)
        with d.case(f"B={B} D={D} V={V}"):
            out = d.call(x, target, draft, seed, offset, None)
            in_range(out, full, V)
            d.same(d.call(x, target, draft, seed, offset, None), out, "repeat")
            d.same(d.call(x.to(torch.int32), target, draft, seed, offset, None), out, "int32 draft tokens")
        good = d.call(x, target, draft, seed, offset, None)
        if B > 1:
            perm = torch.randperm(B, generator=d.g)
            with d.case(f"B={B} D={D} V={V} permuted batch"):
                d.same(d.call(x[perm], target[perm], draft[perm], seed[perm], offset[perm], None),
                       [o[perm] for o in good], "permuted request")
        lens = torch.randint(0, D + 1, (B,), generator=d.g, dtype=torch.int32)
        with d.case(f"B={B} D={D} V={V} ragged draft_lens"):
            out = d.call(x, target, draft, seed, offset, lens)
            in_range(out, lens, V)
            for b in range(min(B, 3)):  # request b alone, with its own d drafts
                n = int(lens[b])
                alone = d.call(x[b:b + 1, :n].contiguous(), target[b:b + 1, :n + 1].contiguous(),
                               draft[b:b + 1, :n].contiguous(), seed[b:b + 1], offset[b:b + 1], None)
                d.same([o[b:b + 1] for o in out], alone, f"request {b} alone")
        b = B // 2
        if D:
            for value, what in ((V, "token == V"), (-1, "negative token")):
                bad = x.clone()
                bad[b, D - 1] = value
                with d.case(f"B={B} D={D} V={V} {what}"):
                    d.bad_data(d.dev(bad, target, draft, seed, offset, None), [b], invalid_verdict, good)
                short = full.clone()
                short[b] = D - 1
                with d.case(f"B={B} D={D} V={V} {what} in an unused draft"):
                    d.same(d.call(bad, target, draft, seed, offset, short), d.call(x, target, draft, seed, offset, short),
                           "unused draft")
        for value in (-1, D + 1):
            lens = full.clone()
            lens[b] = value
            with d.case(f"B={B} D={D} V={V} draft_lens={value}"):
                d.bad_data(d.dev(x, target, draft, seed, offset, lens), [b], invalid_verdict, good)
        for fill, what in ((float("nan"), "NaN"), (-0.5, "negative")):
            bad_t = target.clone()
            bad_t[b, :] = fill
            with d.case(f"B={B} D={D} V={V} {what} target rows"):
                args = d.dev(x, bad_t, draft, seed, offset, None)
                if d.cuda:
                    acc, bonus = d.call(*args)
                    assert 0 <= int(acc[b]) <= D and -1 <= int(bonus[b]) < V
                    keep = [i for i in range(B) if i != b]
                    d.same([acc[keep], bonus[keep]], [o[keep] for o in good], "untouched request")
                else:
                    d.bad_data(args, [b], invalid_verdict)


if __name__ == "__main__":
    sys.exit(main("verify_block", run))
