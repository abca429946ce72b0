"""The drafter side of the ONNX speculative loop: a draft model's or an EAGLE-3 head's step graph and KV.

Both keep, per request, their own KV cache of committed entries and propose a chain of D drafts
per target step the way the torch runtime's drafters do (:mod:`trtspec.runtime.drafters`):

* :class:`DraftModelSide` (``draft_step.onnx``): feed the committed tokens the draft has not seen
  (ending with the root), then one token per draft; K/V of accepted drafts stay valid, those of
  rejected ones are dropped.
* :class:`Eagle3Side` (``eagle3_step.onnx``): one cache entry per committed position t, the pair
  ``(fc(aux_t), x_{t+1})``; after a step that accepted ``root, a_1..a_k`` and emitted the bonus token
  the new entries are ``(aux(root), a_1), ..., (aux(a_k), bonus)`` (the target's captured layers
  along the accepted path); drafts feed the head's own output as g and are scratch.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class OnnxRunError(RuntimeError):
    """A plugin node reported an invalid request, or the graphs do not fit the inputs."""


@dataclass
class KVRows:
    """One request's K/V for one model: ``k, v`` float32 ``[L, Hkv, capacity, d]``; ``length`` slots valid."""

    k: np.ndarray
    v: np.ndarray
    length: int = 0

    @classmethod
    def empty(cls, layers: int, heads: int, capacity: int, dim: int) -> "KVRows":
        z = np.zeros((layers, heads, capacity, dim), dtype=np.float32)
        return cls(z, z.copy())

    def append(self, new_k: np.ndarray, new_v: np.ndarray, rows=None) -> None:
        """Append new K/V ``[L, Hkv, T, d]`` (or the chosen ``rows`` of T) at ``length``."""
        if rows is not None:
            new_k, new_v = new_k[:, :, rows], new_v[:, :, rows]
        t = new_k.shape[2]
        if self.length + t > self.k.shape[2]:
            raise OnnxRunError(f"KV capacity {self.k.shape[2]} exceeded")
        self.k[:, :, self.length:self.length + t] = new_k
        self.v[:, :, self.length:self.length + t] = new_v
        self.length += t


def batch_kv(caches: list[KVRows]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """past_k, past_v ``[L, B, Hkv, P, d]`` padded to the longest cache (slots past a request's length
    are masked by the graphs), and cache_lens int64 ``[B]``."""
    P = max(1, max(c.length for c in caches))   # at least one (masked) slot: engines' profiles start at 1
    k = np.stack([c.k[:, :, :P] for c in caches], axis=1)
    v = np.stack([c.v[:, :, :P] for c in caches], axis=1)
    return k, v, np.array([c.length for c in caches], dtype=np.int64)


class DraftModelSide:
    """Greedy chains from ``draft_step.onnx``; ``cache[r]`` holds K/V of ``tokens[r][:cache[r].length]``."""

    def __init__(self, session, spec, capacity: int):
        self.sess, self.spec, self.capacity = session, spec, capacity
        self.cache: dict[int, KVRows] = {}

    def admit(self, r: int, prompt: list[int], prefill_aux) -> None:
        s = self.spec
        self.cache[r] = KVRows.empty(s.draft_num_layers, s.draft_kv_heads, self.capacity, s.draft_head_dim)

    def can_draft(self, r: int) -> bool:
        return True

    def _step(self, cache: KVRows, tokens: list[int]) -> int:
        k, v, lens = batch_kv([cache])
        logits, nk, nv = self.sess.run(None, {"tokens": np.array([tokens], dtype=np.int64), "cache_lens": lens,
                                              "past_k": k, "past_v": v})
        cache.append(nk[:, 0], nv[:, 0])
        return int(np.argmax(logits[0]))

    def propose(self, r: int, seq: list[int], D: int) -> list[int]:
        """D greedy drafts after ``seq`` (whose last token is the root)."""
        cache = self.cache[r]
        chain = [self._step(cache, seq[cache.length:])]   # the draft sees every committed token once
        for _ in range(D - 1):
            chain.append(self._step(cache, [chain[-1]]))
        return chain

    def commit(self, r: int, committed: int, path_aux, new_tokens: list[int]) -> None:
        """``committed``: tokens now in the target cache; K/V of rejected drafts are dropped."""
        self.cache[r].length = min(self.cache[r].length, committed)

    def release(self, r: int) -> None:
        self.cache.pop(r, None)


@dataclass
class _Entries:
    aux: list = field(default_factory=list)        # rows [k*E] of the target's captured layers
    tokens: list = field(default_factory=list)     # the token each entry pairs with


class Eagle3Side:
    """Greedy chains from ``eagle3_step.onnx`` (see the module docstring)."""

    def __init__(self, session, spec, capacity: int):
        self.sess, self.spec, self.capacity = session, spec, capacity
        self.cache: dict[int, KVRows] = {}
        self.pending: dict[int, _Entries] = {}

    def admit(self, r: int, prompt: list[int], prefill_aux) -> None:
        """``prefill_aux`` ``[n, k*E]``: the target's captured layers over ``prompt[:-1]``."""
        s = self.spec
        self.cache[r] = KVRows.empty(1, s.draft_kv_heads, self.capacity, s.draft_head_dim)
        n = len(prompt) - 1
        self.pending[r] = _Entries(list(prefill_aux[:n]) if n else [], list(prompt[1:n + 1]))

    def can_draft(self, r: int) -> bool:
        return self.cache[r].length + len(self.pending[r].tokens) > 0

    def _run(self, cache: KVRows, tokens, aux, hidden, from_aux):
        k, v, lens = batch_kv([cache])
        logits, nxt, h, nk, nv = self.sess.run(None, {
            "tokens": np.array([tokens], dtype=np.int64), "aux_hidden": aux[None].astype(np.float32),
            "hidden": hidden[None].astype(np.float32), "from_aux": np.array([from_aux]), "cache_lens": lens,
            "past_k": k, "past_v": v})
        cache.append(nk[:, 0], nv[:, 0])
        return int(nxt[0]), h[0]

    def propose(self, r: int, seq: list[int], D: int) -> list[int]:
        s, cache, pend = self.spec, self.cache[r], self.pending[r]
        E, kE = s.draft_hidden_size, len(s.aux_layer_ids) * s.hidden_size
        T = len(pend.tokens)
        if not T:
            raise OnnxRunError(f"request {r}: the EAGLE-3 head has no new entry to draft from")
        # catch up: the committed entries, from the target's features; the last one predicts draft 1
        nxt, h = self._run(cache, pend.tokens, np.stack(pend.aux), np.zeros((T, E)), [True] * T)
        self.pending[r] = _Entries()
        committed = cache.length
        chain = [nxt]
        for _ in range(D - 1):   # deeper drafts: the head's own output as g, written as scratch
            nxt, h = self._run(cache, [chain[-1]], np.zeros((1, kE)), h[None], [False])
            chain.append(nxt)
        cache.length = committed
        return chain

    def commit(self, r: int, committed: int, path_aux, new_tokens: list[int]) -> None:
        """``path_aux`` ``[a+1, k*E]``: captured layers along root + accepted drafts; ``new_tokens``: those
        drafts and the bonus (a + 1 tokens)."""
        self.pending[r].aux += list(path_aux)
        self.pending[r].tokens += list(new_tokens)

    def release(self, r: int) -> None:
        self.cache.pop(r, None)
        self.pending.pop(r, None)
