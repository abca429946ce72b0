"""Sampled speculative generation over the sample / block graphs, step for step as the torch runtime.

Every random draw of a request comes from its own streams, as in :mod:`trtspec.runtime.sampling`:
its seed (``request_seed(seed, index)``), and per target step its step count. A step, for the B
running requests (the runtime's ``Engine.step``)::

    D      = the batch's draft length;  d_b = min(D, budget_b)         (ragged near the end)
    drafts = d_b draws per request from its generator(seed_b, step_b), each from the draft graph's
             in-graph probabilities (temperature / top-k / top-p of the request)
    verdict= the target graph: in-graph target probabilities, then TrtSpecVerifySample / Block
             with draft_probs, draft_lens = d_b, seed_b, offset = step_b
    commit the accepted path and the bonus token; drafts are scratch in the draft cache

With the same seed a request gets the same tokens as ``load_pipeline(..., verify=...)`` on the torch
runtime (the tests check it), up to float rounding between onnxruntime and torch at a draw's boundary.
"""
from __future__ import annotations

import numpy as np

from trtspec.onnx.loop_drafters import KVRows, OnnxRunError, batch_kv


class SampledDraftModel:
    """The draft model's side in sample mode: catch up on committed tokens, then draw d drafts."""

    def __init__(self, session, spec, capacity: int):
        self.sess, self.spec, self.capacity = session, spec, capacity
        self.cache: dict[int, KVRows] = {}

    def admit(self, r: int) -> None:
        s = self.spec
        self.cache[r] = KVRows.empty(s.draft_num_layers, s.draft_kv_heads, self.capacity, s.draft_head_dim)

    def _step(self, cache: KVRows, tokens: list[int], transform) -> np.ndarray:
        k, v, lens = batch_kv([cache])
        t, tk, tp = transform
        _, probs, nk, nv = self.sess.run(None, {
            "tokens": np.array([tokens], dtype=np.int64), "cache_lens": lens, "past_k": k, "past_v": v,
            "temperature": np.array([t], dtype=np.float32), "top_k": np.array([tk], dtype=np.int64),
            "top_p": np.array([tp], dtype=np.float32)})
        cache.append(nk[:, 0], nv[:, 0])
        return probs[0]

    def propose(self, r: int, seq: list[int], d: int, transform, generator) -> tuple[list[int], list[np.ndarray]]:
        """``d`` drafts after ``seq`` drawn with ``generator``, and the rows they were drawn from."""
        import torch

        cache = self.cache[r]
        q = self._step(cache, seq[cache.length:], transform)     # the draft's distribution after the root
        committed = cache.length
        chain, rows = [], []
        for level in range(d):
            x = int(torch.multinomial(torch.from_numpy(q)[None], 1, replacement=True, generator=generator)[0, 0])
            chain.append(x)
            rows.append(q)
            if level + 1 < d:
                q = self._step(cache, [x], transform)
        cache.length = committed                                   # drafts are scratch, as in the runtime
        return chain, rows

    def release(self, r: int) -> None:
        self.cache.pop(r, None)


def _chain(n: int) -> list[int]:
    return [-1] + list(range(n - 1))


class SampledLoop:
    """One :meth:`run` per ``generate`` call of :class:`trtspec.onnx.loop.OnnxSpecDecoder` on sampled graphs."""

    def __init__(self, decoder):
        self.dec, self.spec = decoder, decoder.spec

    def _target(self, tokens, caches, rows, draft_lens, seeds, offsets, transforms) -> dict:
        s = self.spec
        B, N = tokens.shape
        k, v, lens = batch_kv(caches)
        dp = np.zeros((B, N - 1, s.vocab_size), dtype=np.float32)
        for b, rs in enumerate(rows):
            if rs:
                dp[b, :len(rs)] = np.stack(rs)
        feed = {"tokens": tokens, "parents": np.tile(np.array(_chain(N), dtype=np.int32), (B, 1)), "cache_lens": lens,
                "past_k": k, "past_v": v, "draft_probs": dp, "draft_lens": np.asarray(draft_lens, dtype=np.int32),
                "seed": np.asarray(seeds, dtype=np.int64), "offset": np.asarray(offsets, dtype=np.int64),
                "temperature": np.array([t[0] for t in transforms], dtype=np.float32),
                "top_k": np.array([t[1] for t in transforms], dtype=np.int64),
                "top_p": np.array([t[2] for t in transforms], dtype=np.float32)}
        out = self.dec.target.run(None, feed)
        return dict(zip(["accepted_len", "accepted_nodes", "bonus_token", "new_k", "new_v"], out))

    def _prefill(self, cache: KVRows, tokens: list[int], transform) -> None:
        for start in range(0, len(tokens), self.spec.max_nodes):
            chunk = tokens[start:start + self.spec.max_nodes]
            out = self._target(np.array([chunk], dtype=np.int64), [cache], [[]], [0], [0], [0], [transform])
            cache.append(out["new_k"][:, 0], out["new_v"][:, 0])

    def run(self, prompts, max_new_tokens: int, eos_ids, transform, seed: int):
        from trtspec.runtime.sampling import generators, request_seed, signed64

        s, dec = self.spec, self.dec
        longest = max(len(p) for p in prompts)
        max_seq_len = min(s.context, max(longest + max_new_tokens, 2)) if longest < s.context else s.context
        cap = longest + max_new_tokens + 2 * s.max_nodes
        side = SampledDraftModel(dec.draft, s, cap)
        seeds = [request_seed(seed, i) for i in range(len(prompts))]
        seqs = [list(p) for p in prompts]
        steps = [0] * len(prompts)
        tcache = [KVRows.empty(s.num_layers, s.kv_heads, cap, s.head_dim) for _ in prompts]
        for r, seq in enumerate(seqs):
            self._prefill(tcache[r], seq[:-1], transform)
            side.admit(r)
        out: list[list[int]] = [[] for _ in prompts]
        active, stats = list(range(len(prompts))), dec.new_stats()
        while active:
            D = dec.sched.depth_for_batch(len(active))
            depths = [max(0, min(D, min(max_new_tokens - len(out[r]), max_seq_len - len(seqs[r])) - 1)) for r in active]
            L = max(depths)
            chains, rows = [[] for _ in active], [[] for _ in active]
            if L:
                gens = generators([(seeds[r], steps[r]) for r in active], "cpu")
                for j, r in enumerate(active):
                    chains[j], rows[j] = side.propose(r, seqs[r], depths[j], transform, gens[j])
            tokens = np.array([[seqs[r][-1]] + c + [seqs[r][-1]] * (L - len(c)) for r, c in zip(active, chains)],
                              dtype=np.int64)
            res = self._target(tokens, [tcache[r] for r in active], rows, depths,
                               [signed64(seeds[r]) for r in active], [steps[r] for r in active], [transform] * len(active))
            dec.check(res["accepted_len"], res["bonus_token"])
            stats.steps += 1
            still = []
            for j, r in enumerate(active):
                a = int(res["accepted_len"][j])
                path = res["accepted_nodes"][j, :a + 1]
                stats.accepted.append(a)
                steps[r] += 1
                tcache[r].append(res["new_k"][:, j], res["new_v"][:, j], rows=path.tolist())
                new = [int(t) for t in tokens[j, path[1:]]] + [int(res["bonus_token"][j])]
                keep = min(len(new), max_new_tokens - len(out[r]))
                stop = next((i + 1 for i, t in enumerate(new[:keep]) if t in eos_ids), keep)
                out[r] += new[:stop]
                seqs[r] += new[:stop]
                if len(out[r]) >= max_new_tokens or len(seqs[r]) >= max_seq_len or (out[r] and out[r][-1] in eos_ids):
                    side.release(r)
                else:
                    still.append(r)
            active = still
        return out, stats


def check_transform(spec, temperature: float, top_k: int, top_p: float) -> None:
    """Refuse sampling parameters the graphs cannot apply exactly, naming the argument."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    if spec.sort_width < top_k < spec.vocab_size:
        raise OnnxRunError(f"top_k={top_k} exceeds the graphs' in-graph sort width {spec.sort_width} (TensorRT's TopK "
                           "limit); use top_k <= that or 0")
