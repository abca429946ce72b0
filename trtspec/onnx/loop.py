"""Speculative generation over the exported ONNX graphs (onnxruntime, CPU).

The host owns every KV cache, as a TensorRT runtime would. Per step, for the B running requests::

    D                <- the draft length of the batch's tier (draft_len, or draft_len_schedule[B])
    drafts x_1..x_D  <- the drafter's step graph (loop_drafters, loop_block): a draft model, an EAGLE-3 head or a
                        DFlash / DSpark head (one block per step)
    verdict          <- TargetVerifyStep over [root, x_1..x_D] for all requests at once
    commit           the accepted path's K/V at cache_len .. cache_len + a, the accepted tokens and
                     the bonus token, which becomes the next root; the drafter's new entries

With greedy graphs the output is token for token the target's greedy decoding; with sample /
block graphs (:mod:`trtspec.onnx.loop_sampled`) it is what the torch runtime samples for the same
seed (the tests check both against the runtime).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtspec.onnx.loop_drafters import DraftModelSide, Eagle3Side, KVRows, OnnxRunError, batch_kv
from trtspec.onnx.ort_ops import session

__all__ = ["OnnxRunError", "OnnxSpecDecoder", "OnnxStats", "check_verdict"]


def check_verdict(accepted_len: np.ndarray, bonus: np.ndarray) -> None:
    """Raise if the verification node marked a request invalid (bonus -1, see ort_ops)."""
    bad = np.nonzero(bonus < 0)[0]
    if bad.size:
        raise OnnxRunError(f"the verification node rejected request(s) {bad.tolist()}: invalid tree or token ids")


@dataclass
class OnnxStats:
    """Steps and accepted drafts of one :meth:`OnnxSpecDecoder.generate` call."""

    steps: int = 0
    accepted: list[int] = field(default_factory=list)

    @property
    def mean_al(self) -> float:
        """Tokens per target step, bonus included."""
        return 1.0 + float(np.mean(self.accepted)) if self.accepted else 0.0


def _side(drafter: str):
    """The drafter side class of ``drafter`` (:mod:`trtspec.onnx.loop_drafters`, :mod:`trtspec.onnx.loop_block`)."""
    if drafter in ("dflash", "dspark"):
        from trtspec.onnx.loop_block import BlockSide

        return BlockSide
    return Eagle3Side if drafter == "eagle3" else DraftModelSide


def _chain(n: int, rows: int) -> np.ndarray:
    return np.tile(np.array([-1] + list(range(n - 1)), dtype=np.int32), (rows, 1))


class OnnxSpecDecoder:
    """Greedy chain speculation over a directory written by :func:`trtspec.onnx.export.export_step_graphs`.

    ``draft_len``: D per step (default: the exported ``max_nodes - 1``); ``draft_len_schedule``:
    batch bound -> D with TensorRT-LLM semantics (as :class:`trtspec.runtime.params.SpecConfig`).
    """

    def __init__(self, onnx_dir: str | Path, *, draft_len: int | None = None,
                 draft_len_schedule: dict[int, int] | None = None, threads: int = 0):
        from trtspec.onnx.export import ExportSpec
        from trtspec.runtime.params import SpecConfig

        onnx_dir = Path(onnx_dir)
        self.spec = ExportSpec.load(onnx_dir)
        D = self.spec.max_nodes - 1 if draft_len is None else draft_len
        try:
            self.sched = SpecConfig(draft_len=D, draft_len_schedule=draft_len_schedule, max_draft_len=4095)
        except ValueError as e:
            raise OnnxRunError(str(e)) from None
        if self.sched.max_depth + 1 > self.spec.max_nodes:
            raise OnnxRunError(f"draft length {self.sched.max_depth} needs {self.sched.max_depth + 1} nodes; the graphs "
                               f"were exported for at most max_nodes={self.spec.max_nodes}")
        self.target = session(onnx_dir / "target_verify.onnx", threads)
        self.draft = session(onnx_dir / self.spec.draft_graph, threads)
        self.eagle3 = self.spec.drafter == "eagle3"
        self.captures = bool(self.spec.aux_layer_ids)           # EAGLE-3 / block heads read the target's layers

    def _target(self, tokens: np.ndarray, parents: np.ndarray, caches: list[KVRows]) -> dict:
        k, v, lens = batch_kv(caches)
        out = self.target.run(None, {"tokens": tokens, "parents": parents, "cache_lens": lens, "past_k": k, "past_v": v})
        names = ["accepted_len", "accepted_nodes", "bonus_token", "new_k", "new_v", "aux_hidden"]
        return dict(zip(names, out))

    def _prefill(self, cache: KVRows, tokens: list[int]) -> np.ndarray | None:
        """Run ``tokens`` through the target as chains of at most ``max_nodes``, keeping all K/V;
        returns the captured layers ``[len(tokens), k*E]`` (EAGLE-3) or None."""
        aux = []
        for start in range(0, len(tokens), self.spec.max_nodes):
            chunk = tokens[start:start + self.spec.max_nodes]
            out = self._target(np.array([chunk], dtype=np.int64), _chain(len(chunk), 1), [cache])
            cache.append(out["new_k"][:, 0], out["new_v"][:, 0])
            if self.captures:
                aux.append(out["aux_hidden"][0])
        return np.concatenate(aux) if aux else None

    @staticmethod
    def new_stats() -> OnnxStats:
        return OnnxStats()

    @staticmethod
    def check(accepted_len, bonus) -> None:
        check_verdict(accepted_len, bonus)

    def generate(self, prompts: list[list[int]], max_new_tokens: int, eos_ids=(), *, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0) -> tuple[list[list[int]], OnnxStats]:
        """Generate for a batch of token-id prompts; returns the new ids and the stats.

        Greedy graphs decode greedily (``temperature`` must be 0); sample / block graphs sample with
        ``temperature`` / ``top_k`` / ``top_p`` (applied in the graphs) and request i's random stream
        derived from ``seed`` and i, as ``Pipeline.generate_ids(..., seed=seed)`` of the torch runtime.
        """
        from trtspec.onnx.loop_sampled import SampledLoop, check_transform

        V = self.spec.vocab_size
        if not prompts or any(len(p) < 1 for p in prompts):
            raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
        if any(not 0 <= t < V for p in prompts for t in p):
            raise ValueError(f"prompt token ids must be in 0..{V - 1} (the target's vocab_size)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if self.spec.verify != "greedy":
            check_transform(self.spec, temperature, top_k, top_p)
            return SampledLoop(self).run(prompts, max_new_tokens, tuple(eos_ids), (temperature, top_k, top_p), seed)
        if temperature != 0 or top_k or top_p != 1.0:
            raise OnnxRunError(f"these graphs verify greedily (verify='greedy'); temperature={temperature}, "
                               f"top_k={top_k}, top_p={top_p} need graphs exported with verify='sample' or 'block'")
        s = self.spec
        cap = max(len(p) for p in prompts) + max_new_tokens + 2 * s.max_nodes
        side = _side(s.drafter)(self.draft, s, cap)
        seqs = [list(p) for p in prompts]
        tcache = [KVRows.empty(s.num_layers, s.kv_heads, cap, s.head_dim) for _ in prompts]
        for r, seq in enumerate(seqs):
            aux = self._prefill(tcache[r], seq[:-1]) if len(seq) > 1 else None
            side.admit(r, seq, aux)
        out: list[list[int]] = [[] for _ in prompts]
        active, stats = list(range(len(prompts))), OnnxStats()
        while active:
            D = self.sched.depth_for_batch(len(active))
            # greedy verification emits the target's argmax whatever was drafted, so a request that
            # cannot draft yet (an EAGLE-3 head with no entry) fills its chain with its root
            drafts = [side.propose(r, seqs[r], D) if D and side.can_draft(r) else [seqs[r][-1]] * D for r in active]
            tokens = np.array([[seqs[r][-1]] + d for r, d in zip(active, drafts)], dtype=np.int64)
            res = self._target(tokens, _chain(D + 1, len(active)), [tcache[r] for r in active])
            check_verdict(res["accepted_len"], res["bonus_token"])
            stats.steps += 1
            still = []
            for j, r in enumerate(active):
                a, path = int(res["accepted_len"][j]), res["accepted_nodes"][j, :int(res["accepted_len"][j]) + 1]
                stats.accepted.append(a)
                tcache[r].append(res["new_k"][:, j], res["new_v"][:, j], rows=path.tolist())   # root + accepted path
                new = [int(t) for t in tokens[j, path[1:]]] + [int(res["bonus_token"][j])]
                side.commit(r, tcache[r].length, res["aux_hidden"][j, path] if self.captures else None, new)
                for t in new:
                    if len(out[r]) < max_new_tokens:
                        out[r].append(t)
                        seqs[r].append(t)
                    if t in eos_ids or len(out[r]) >= max_new_tokens:
                        break
                if len(out[r]) < max_new_tokens and out[r][-1] not in eos_ids:
                    still.append(r)
                else:
                    side.release(r)
            active = still
        return out, stats
