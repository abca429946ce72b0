"""Held-out loss and chain speculative decoding (greedy) with plain ``transformers`` models.

Independent of ``trtspec.runtime`` on purpose: the zoo measures its own pair, and the runtime is
cross-checked against these figures.

Terms: per target step the draft proposes D tokens ``d_1..d_D``; the target scores
``[last, d_1..d_D]`` in one forward (D+1 rows); ``n`` = length of the longest prefix with
``d_k == argmax target row k-1``; the step emits ``d_1..d_n`` plus the target's own token at row n
(the **bonus**), so **AL** = n + 1 (1 <= AL <= D+1). Greedy speculative output equals the target's
greedy output token for token.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field


def heldout_loss(model, stream, seq_len: int, max_windows: int) -> float:
    """Mean next-token cross-entropy (nats/token) over non-overlapping ``seq_len`` windows of ``stream`` [T]."""
    import torch

    n = min(max_windows, (stream.numel() - 1) // seq_len)
    if n < 1:
        raise ValueError(f"stream: needs more than seq_len={seq_len} tokens, has {stream.numel()}")
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, n, 8):
            idx = torch.arange(i, min(n, i + 8)) * seq_len
            x = torch.stack([stream[j : j + seq_len + 1] for j in idx.tolist()])  # [b, S+1]
            logits = model(input_ids=x[:, :-1]).logits.float()  # [b, S, V]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum")
            total += loss.item()
            count += x[:, 1:].numel()
    return total / count


def _step(model, ids: list[int], cache):
    """Feed ``ids`` (1 x len) through ``model`` extending ``cache``; returns logits [len, V]."""
    import torch

    import inspect

    key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=True, **{key: cache})
    return out.logits[0]


def _crop(cache, length: int) -> None:
    """Keep the first ``length`` positions of ``cache`` (transformers 5 crops by a negative count to remove)."""
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


def greedy_generate(model, prompt: list[int], max_new_tokens: int, eos_id: int | None = None) -> list[int]:
    """Target-only greedy decoding with a KV cache; returns the new token ids (<= max_new_tokens)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache()
    out: list[int] = []
    with torch.no_grad():
        logits = _step(model, list(prompt), cache)
        while True:
            tok = int(logits[-1].argmax())
            out.append(tok)
            if len(out) >= max_new_tokens or tok == eos_id:
                return out
            logits = _step(model, [tok], cache)


@dataclass
class SpecResult:
    """New tokens and the accepted draft count n (AL = n + 1) of every target verification step."""

    tokens: list[int]
    accepted: list[int] = field(default_factory=list)


def speculative_generate(target, draft, prompt: list[int], draft_len: int, max_new_tokens: int,
                         eos_id: int | None = None) -> SpecResult:
    """Chain speculative decoding, greedy verification, KV caches on both models (rolled back on rejection)."""
    import torch
    from transformers import DynamicCache

    if draft_len < 1:
        raise ValueError(f"draft_len must be >= 1, got {draft_len}")
    t_cache, d_cache = DynamicCache(), DynamicCache()
    seq = list(prompt)
    res = SpecResult(tokens=[])
    with torch.no_grad():
        logits = _step(target, seq, t_cache)  # target cache covers seq
        seq.append(int(logits[-1].argmax()))
        res.tokens.append(seq[-1])
        t_len, d_len = len(seq) - 1, 0  # tokens each cache covers; seq[-1] is the pending token
        while len(res.tokens) < max_new_tokens and seq[-1] != eos_id:
            start = len(seq)
            # draft proposes d_1..d_D; its cache ends covering seq + d_1..d_{D-1}
            props: list[int] = []
            dl = _step(draft, seq[d_len:], d_cache)
            d_len = len(seq)
            for k in range(draft_len):
                props.append(int(dl[-1].argmax()))
                if k < draft_len - 1:
                    dl = _step(draft, [props[-1]], d_cache)
                    d_len += 1
            # target scores [pending.., d_1..d_D]; row base+k predicts the token after d_k
            tl = _step(target, seq[t_len:] + props, t_cache)
            base = start - t_len - 1
            preds = tl[base:].argmax(-1).tolist()  # [D+1]
            n = 0
            while n < draft_len and props[n] == preds[n]:
                n += 1
            new = props[:n] + [preds[n]]
            if eos_id is not None and eos_id in new:
                new = new[: new.index(eos_id) + 1]
            seq.extend(new)
            res.tokens.extend(new)
            res.accepted.append(n)
            t_len = start + n  # committed = old seq + d_1..d_n; the bonus stays pending
            _crop(t_cache, t_len)
            d_len = min(d_len, start + min(n, draft_len - 1))
            _crop(d_cache, d_len)
    res.tokens = res.tokens[:max_new_tokens]
    return res


def acceptance_profile(accepted: list[int], draft_len: int, source: str, category: str = "coding") -> dict:
    """``trtspec.acceptance/v1`` dict from per-step accepted counts measured with chain length ``draft_len``.

    ``rates[k-1]`` = P(n >= k | n >= k-1), ``joint[k-1]`` = P(n >= k), ``mean_al`` = mean(n + 1).
    """
    if not accepted:
        raise ValueError("accepted: no verification steps measured")
    steps = len(accepted)
    joint = [sum(1 for n in accepted if n >= k) / steps for k in range(1, draft_len + 1)]
    rates = []
    for k in range(1, draft_len + 1):
        den = sum(1 for n in accepted if n >= k - 1)
        rates.append(sum(1 for n in accepted if n >= k) / den if den else 0.0)
    mean_al = sum(n + 1 for n in accepted) / steps
    return {
        "format": "trtspec.acceptance/v1",
        "drafter": "draft_model",
        "draft_len": draft_len,
        "rates": [round(r, 6) for r in rates],
        "joint": [round(j, 6) for j in joint],
        "mean_al": round(mean_al, 6),
        "num_steps": steps,
        "per_category": {category: {"rates": [round(r, 6) for r in rates], "mean_al": round(mean_al, 6)}},
        "source": source,
    }


def measure(target, draft, prompts: list[list[int]], new_tokens: int, max_draft_len: int,
            eos_id: int | None = None, progress=None) -> dict:
    """AL for D = 1..max_draft_len, target-only and speculative wall time (B=1, this CPU), output agreement.

    Returns ``{"al_by_draft_len": {D: AL}, "accepted_by_draft_len": {D: [n...]}, "target_s", "spec_s": {D: s},
    "target_tokens", "spec_tokens": {D: int}, "greedy_match": {D: fraction of prompts with identical output}}``.
    """
    import torch

    target.eval()
    draft.eval()
    t0 = time.perf_counter()
    ref = [greedy_generate(target, p, new_tokens, eos_id) for p in prompts]
    target_s = time.perf_counter() - t0
    out = {"target_s": target_s, "target_tokens": sum(map(len, ref)), "al_by_draft_len": {},
           "accepted_by_draft_len": {}, "spec_s": {}, "spec_tokens": {}, "greedy_match": {},
           "threads": torch.get_num_threads()}
    for d in range(1, max_draft_len + 1):
        t0 = time.perf_counter()
        runs = [speculative_generate(target, draft, p, d, new_tokens, eos_id) for p in prompts]
        out["spec_s"][d] = time.perf_counter() - t0
        acc = [n for r in runs for n in r.accepted]
        out["accepted_by_draft_len"][d] = acc
        out["al_by_draft_len"][d] = sum(n + 1 for n in acc) / max(1, len(acc))
        out["spec_tokens"][d] = sum(len(r.tokens) for r in runs)
        out["greedy_match"][d] = sum(r.tokens == g for r, g in zip(runs, ref)) / len(prompts)
        if progress is not None:
            progress(d, out)
    return out
