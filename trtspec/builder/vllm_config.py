"""Typed model of the ``vllm.yaml`` that ``trtspec build`` emits (``vllm serve MODEL --config vllm.yaml``).

Only the documented fields trtspec writes are modelled (vLLM ``vllm/config/speculative.py``):
``speculative_config.method`` (``draft_model``, ``eagle3``, ``mtp``, ``ngram``, ``dflash``,
``suffix``), ``num_speculative_tokens`` (K, the largest draft length), ``model`` (draft
checkpoint, not for ``ngram``/``suffix``/``mtp``), ``prompt_lookup_max``/``prompt_lookup_min``
(``ngram``) and ``num_speculative_tokens_per_batch_size``: a list of ``[lo, hi, k]`` batch ranges
(inclusive, contiguous from 1, ``k <= num_speculative_tokens``). Batches above the last ``hi``
run without speculation, the same semantics as TensorRT-LLM's ``draft_len_schedule``.
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

#: trtspec drafter -> vLLM speculative method (drafters missing here have no vLLM equivalent).
VLLM_METHODS: dict[str, str] = {
    "draft_model": "draft_model",
    "eagle3": "eagle3",
    "mtp": "mtp",
    "ngram": "ngram",
    "dflash": "dflash",
    "sa": "suffix",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VllmSpeculativeConfig(_Strict):
    """``speculative_config`` block."""

    method: Literal["draft_model", "eagle3", "mtp", "ngram", "dflash", "suffix"]
    num_speculative_tokens: PositiveInt
    model: Optional[str] = Field(default=None, description="Draft checkpoint directory (relative to the bundle).")
    prompt_lookup_max: Optional[PositiveInt] = None
    prompt_lookup_min: Optional[PositiveInt] = None
    num_speculative_tokens_per_batch_size: Optional[list[tuple[PositiveInt, PositiveInt, NonNegativeInt]]] = None

    @model_validator(mode="after")
    def _check(self):
        needs_model = self.method in ("draft_model", "eagle3", "dflash")
        if needs_model and not self.model:
            raise ValueError(f"speculative_config.model is required for method {self.method}")
        if not needs_model and self.method != "mtp" and self.model is not None:
            raise ValueError(f"speculative_config.model must be unset for method {self.method}")
        if (self.prompt_lookup_max is not None) != (self.method == "ngram"):
            raise ValueError("prompt_lookup_max is set exactly when method is ngram")
        if self.prompt_lookup_min is not None and self.prompt_lookup_max is not None \
                and self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min must be <= prompt_lookup_max")
        ranges = self.num_speculative_tokens_per_batch_size
        if ranges is not None:
            if not ranges:
                raise ValueError("num_speculative_tokens_per_batch_size must not be empty (omit it instead)")
            expect_lo = 1
            for lo, hi, k in ranges:
                if lo != expect_lo or hi < lo:
                    raise ValueError(f"num_speculative_tokens_per_batch_size ranges must be contiguous from 1; "
                                     f"got {ranges}")
                if k > self.num_speculative_tokens:
                    raise ValueError(f"num_speculative_tokens_per_batch_size: k={k} exceeds "
                                     f"num_speculative_tokens={self.num_speculative_tokens}")
                expect_lo = hi + 1
            if ranges[0][2] != self.num_speculative_tokens:
                raise ValueError("the first batch range must use num_speculative_tokens")
        return self


class VllmConfig(_Strict):
    """The whole ``vllm.yaml`` (keys as ``vllm serve`` long options)."""

    model: str
    tensor_parallel_size: PositiveInt = 1
    max_num_seqs: PositiveInt
    max_model_len: PositiveInt
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    speculative_config: Optional[VllmSpeculativeConfig] = None


def schedule_to_ranges(schedule: dict[int, int]) -> list[tuple[int, int, int]]:
    """``{4: 4, 8: 2, 32: 1}`` (inclusive upper bound -> k) -> ``[(1, 4, 4), (5, 8, 2), (9, 32, 1)]``;
    neighbouring bounds with the same k become one range."""
    out: list[tuple[int, int, int]] = []
    lo = 1
    for hi in sorted(schedule):
        k = int(schedule[hi])
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], hi, k)
        else:
            out.append((lo, hi, k))
        lo = hi + 1
    return out
