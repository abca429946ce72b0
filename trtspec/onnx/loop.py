"""Greedy speculative generation over the exported ONNX graphs (onnxruntime, CPU).

The host owns both KV caches, as a TensorRT runtime would. Per step, for every request::

    drafts x_1..x_D  <- D greedy draft steps (DraftStep graph) after feeding the draft what it
                        has not seen yet (the committed tokens past its cache, ending with the root)
    verdict          <- TargetVerifyStep over [root, x_1..x_D] for all requests at once
    commit           the accepted path's K/V at cache_len .. cache_len + a (accepted_kv_indices),
                     the accepted tokens and the bonus token, which becomes the next root

The output is token for token the target's greedy decoding (the check is against the torch
runtime in the tests).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtspec.onnx.ort_ops import session


class OnnxRunError(RuntimeError):
    """A plugin node reported an invalid request, or the graphs do not fit the inputs."""


def check_verdict(accepted_len: np.ndarray, bonus: np.ndarray) -> None:
    """Raise if TrtSpecVerifyGreedy marked a request invalid (bonus -1, see ort_ops)."""
    bad = np.nonzero(bonus < 0)[0]
    if bad.size:
        raise OnnxRunError(f"TrtSpecVerifyGreedy rejected request(s) {bad.tolist()}: invalid tree or token ids")


@dataclass
class _Cache:
    """One request's K/V for one model: ``k, v`` float32 ``[L, Hkv, capacity, d]``; ``length`` slots valid."""

    k: np.ndarray
    v: np.ndarray
    length: int = 0

    @classmethod
    def empty(cls, layers: int, heads: int, capacity: int, dim: int) -> "_Cache":
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


def _batch(caches: list[_Cache]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """past_k, past_v ``[L, B, Hkv, P, d]`` padded to the longest cache (slots past a request's length
    are masked by the graphs), and cache_lens int64 ``[B]``."""
    P = max(1, max(c.length for c in caches))   # at least one (masked) slot: engines' profiles start at 1
    k = np.stack([c.k[:, :, :P] for c in caches], axis=1)
    v = np.stack([c.v[:, :, :P] for c in caches], axis=1)
    return k, v, np.array([c.length for c in caches], dtype=np.int64)


@dataclass
class OnnxStats:
    """Steps and accepted drafts of one :meth:`OnnxSpecDecoder.generate` call."""

    steps: int = 0
    accepted: list[int] = field(default_factory=list)

    @property
    def mean_al(self) -> float:
        """Tokens per target step, bonus included."""
        return 1.0 + float(np.mean(self.accepted)) if self.accepted else 0.0


class OnnxSpecDecoder:
    """Greedy chain speculation with ``D = max_nodes - 1`` over a directory written by
    :func:`trtspec.onnx.export.export_step_graphs`."""

    def __init__(self, onnx_dir: str | Path, threads: int = 0):
        onnx_dir = Path(onnx_dir)
        self.spec = json.loads((onnx_dir / "onnx_spec.json").read_text())
        self.target = session(onnx_dir / "target_verify.onnx", threads)
        self.draft = session(onnx_dir / "draft_step.onnx", threads)
        self.D = self.spec["max_nodes"] - 1
        if self.spec["max_depth"] != self.D:
            raise OnnxRunError("this loop drafts chains; export with max_depth = max_nodes - 1")

    def _draft_step(self, cache: _Cache, tokens: list[int]) -> int:
        k, v, lens = _batch([cache])
        logits, nk, nv = self.draft.run(None, {"tokens": np.array([tokens], dtype=np.int64), "cache_lens": lens,
                                               "past_k": k, "past_v": v})
        cache.append(nk[:, 0], nv[:, 0])
        return int(np.argmax(logits[0]))

    def _prefill_target(self, cache: _Cache, tokens: list[int]) -> None:
        """Run the prompt (without its last token) through the target as chains of N, keeping all K/V."""
        N = self.D + 1
        chain = np.array([[-1] + list(range(N - 1))], dtype=np.int32)
        for start in range(0, len(tokens), N):
            chunk = tokens[start:start + N]
            padded = np.array([chunk + [0] * (N - len(chunk))], dtype=np.int64)   # padding sees nothing real after it
            k, v, lens = _batch([cache])
            out = self.target.run(None, {"tokens": padded, "parents": chain, "cache_lens": lens, "past_k": k, "past_v": v})
            cache.append(out[3][:, 0], out[4][:, 0], rows=list(range(len(chunk))))

    def generate(self, prompts: list[list[int]], max_new_tokens: int, eos_ids=()) -> tuple[list[list[int]], OnnxStats]:
        """Greedy generation for a batch of token-id prompts; returns the new ids and the stats."""
        if not prompts or any(len(p) < 1 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        s, N = self.spec, self.D + 1
        cap = max(len(p) for p in prompts) + max_new_tokens + 2 * N
        seqs = [list(p) for p in prompts]
        tcache = [_Cache.empty(s["num_layers"], s["kv_heads"], cap, s["head_dim"]) for _ in prompts]
        dcache = [_Cache.empty(s["draft_num_layers"], s["draft_kv_heads"], cap, s["draft_head_dim"]) for _ in prompts]
        for seq, tc in zip(seqs, tcache):
            if len(seq) > 1:
                self._prefill_target(tc, seq[:-1])
        out: list[list[int]] = [[] for _ in prompts]
        active = list(range(len(prompts)))
        stats = OnnxStats()
        while active:
            drafts = []
            for r in active:   # the draft sees every committed token except those already cached
                x = self._draft_step(dcache[r], seqs[r][dcache[r].length:])
                chain = [x]
                for _ in range(self.D - 1):
                    chain.append(self._draft_step(dcache[r], [chain[-1]]))
                drafts.append(chain)
            k, v, lens = _batch([tcache[r] for r in active])
            tokens = np.array([[seqs[r][-1]] + d for r, d in zip(active, drafts)], dtype=np.int64)
            parents = np.tile(np.array([-1] + list(range(N - 1)), dtype=np.int32), (len(active), 1))
            acc_len, acc_nodes, bonus, nk, nv = self.target.run(
                None, {"tokens": tokens, "parents": parents, "cache_lens": lens, "past_k": k, "past_v": v})
            check_verdict(acc_len, bonus)
            stats.steps += 1
            still = []
            for j, r in enumerate(active):
                a = int(acc_len[j])
                stats.accepted.append(a)
                tcache[r].append(nk[:, j], nv[:, j], rows=acc_nodes[j, :a + 1].tolist())   # root + accepted path
                dcache[r].length = min(dcache[r].length, tcache[r].length)   # drop K/V of rejected drafts
                new = [int(t) for t in tokens[j, acc_nodes[j, 1:a + 1]]] + [int(bonus[j])]
                for t in new:
                    if len(out[r]) < max_new_tokens:
                        out[r].append(t)
                        seqs[r].append(t)
                    if t in eos_ids or len(out[r]) >= max_new_tokens:
                        break
                if len(out[r]) < max_new_tokens and out[r][-1] not in eos_ids:
                    still.append(r)
            active = still
        return out, stats
