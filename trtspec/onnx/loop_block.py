"""The DFlash / DSpark side of the ONNX speculative loop (``dflash_step.onnx`` / ``dspark_step.onnx``).

Per request it keeps the draft layers' context K/V (one slot per committed token but the root) and the target
features committed since its last call (``pending``): the prompt's prefill, then each step's accepted path
(root first). A proposal sends the pending features and the root through the step graph, which appends their
K/V and drafts the whole block; the host keeps the new K/V and the first D drafts -- the torch runtime's
:class:`trtspec.runtime.drafters.dflash.DFlashDrafter` step for step.
"""
from __future__ import annotations

import numpy as np

from trtspec.onnx.loop_drafters import KVRows, OnnxRunError, batch_kv


class BlockSide:
    """Greedy block drafts from a DFlash / DSpark step graph."""

    def __init__(self, session, spec, capacity: int):
        self.sess, self.spec, self.capacity = session, spec, capacity
        self.cache: dict[int, KVRows] = {}
        self.pending: dict[int, list] = {}
        self.drafts = spec.block_size - 1 if spec.drafter == "dflash" else spec.block_size

    def admit(self, r: int, prompt: list[int], prefill_aux) -> None:
        """``prefill_aux`` ``[n, k*E]``: the target's captured layers over ``prompt[:-1]`` (None when n = 0)."""
        s = self.spec
        self.cache[r] = KVRows.empty(s.draft_num_layers, s.draft_kv_heads, self.capacity, s.draft_head_dim)
        self.pending[r] = list(prefill_aux[:len(prompt) - 1]) if prefill_aux is not None else []

    def can_draft(self, r: int) -> bool:
        return True

    def propose(self, r: int, seq: list[int], D: int) -> list[int]:
        if D > self.drafts:
            raise OnnxRunError(f"D={D} exceeds the {self.drafts} drafts of the {self.spec.drafter} block")
        cache, pend = self.cache[r], self.pending[r]
        kE = len(self.spec.aux_layer_ids) * self.spec.hidden_size
        aux = np.stack(pend).astype(np.float32) if pend else np.zeros((1, kE), dtype=np.float32)
        k, v, lens = batch_kv([cache])
        drafts, nk, nv = self.sess.run(None, {
            "roots": np.array([seq[-1]], dtype=np.int64), "aux_hidden": aux[None],
            "new_lens": np.array([len(pend)], dtype=np.int64), "cache_lens": lens, "past_k": k, "past_v": v})
        cache.append(nk[:, 0, :, :len(pend)], nv[:, 0, :, :len(pend)])
        self.pending[r] = []
        return [int(t) for t in drafts[0, :D]]

    def commit(self, r: int, committed: int, path_aux, new_tokens: list[int]) -> None:
        """``path_aux`` ``[a+1, k*E]``: the target's captured layers along the root and the accepted drafts."""
        self.pending[r] += list(path_aux)

    def release(self, r: int) -> None:
        self.cache.pop(r, None)
        self.pending.pop(r, None)
