"""Typed model of the ``vllm.yaml`` that ``trtspec build`` emits (``vllm serve MODEL --config vllm.yaml``).

Only the fields trtspec writes are modelled, and only those the targeted vLLM version defines: the facts file of
each encoded version (``trtspec/builder/engines/vllm-<version>.yaml``) cites, for every key, the engine source that
defines it (``vllm/engine/arg_utils.py`` for the top-level keys, ``vllm/config/speculative.py`` for
``speculative_config``). Validate with the version's facts in the pydantic context (:func:`validate_vllm`);
without one the default version's facts apply.

``speculative_config``: ``method`` (the version's methods), ``num_speculative_tokens`` (K, the largest draft
length), ``model`` (the draft, for the methods that need one), ``prompt_lookup_max``/``prompt_lookup_min``
(``ngram``), ``num_speculative_tokens_per_batch_size`` (where the version has it: a list of inclusive
``[lo, hi, k]`` batch ranges, contiguous from 1, ``k <= num_speculative_tokens``; vLLM keeps the last ``k`` for
batches above the last range, so trtspec covers 1..max_num_seqs and writes zeros explicitly; refused where the
version would drop it: a method that runs on Model Runner V1 without per-batch support, or data parallelism),
``rejection_sample_method`` (``standard`` | ``synthetic`` | ``block``, where the version has it; block not on a
V1-runner method) and ``enable_adaptive_verification`` (the version's adaptive methods). Top level:
``tensor_parallel_size``, ``data_parallel_size`` and ``enable_expert_parallel`` (where the version has them).
"""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationInfo, model_validator)

from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, EngineVersion, engine_version

#: Versions of vLLM whose ``vllm.yaml`` keys are encoded (facts under trtspec/builder/engines/).
VLLM_VERSIONS: tuple[str, ...] = VERSIONS["vllm"]
#: The version ``--vllm-version`` defaults to.
DEFAULT_VLLM_VERSION = DEFAULT_VERSION["vllm"]


def facts_of(info: Optional[ValidationInfo]) -> EngineVersion:
    """The vLLM facts in the validation context (``{"vllm": EngineVersion}``), else the default version's."""
    ctx = getattr(info, "context", None) or {}
    return ctx.get("vllm") or engine_version("vllm")


def vllm_method(drafter: str, version: str = DEFAULT_VLLM_VERSION) -> Optional[str]:
    """The vLLM speculative method of a trtspec drafter on ``version``, or None when it has none."""
    return engine_version("vllm", version)["methods"].get(drafter)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VllmSpeculativeConfig(_Strict):
    """``speculative_config`` block."""

    method: Literal["draft_model", "eagle3", "mtp", "ngram", "dflash", "dspark", "suffix"]
    num_speculative_tokens: PositiveInt
    model: Optional[str] = Field(default=None, description="Draft checkpoint directory (relative to the bundle).")
    prompt_lookup_max: Optional[PositiveInt] = None
    prompt_lookup_min: Optional[PositiveInt] = None
    num_speculative_tokens_per_batch_size: Optional[list[tuple[PositiveInt, PositiveInt, NonNegativeInt]]] = None
    rejection_sample_method: Optional[Literal["standard", "synthetic", "block"]] = None
    enable_adaptive_verification: Optional[bool] = None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        facts = facts_of(info)
        if self.method not in facts["methods"].values():
            raise ValueError(f"speculative_config.method {self.method!r} does not exist in {facts.label} "
                             f"(methods: {sorted(set(facts['methods'].values()))})")
        needs_model = self.method in facts["methods_with_model"]
        if needs_model and not self.model:
            raise ValueError(f"speculative_config.model is required for method {self.method}")
        if not needs_model and self.method != "mtp" and self.model is not None:
            raise ValueError(f"speculative_config.model must be unset for method {self.method}")
        if (self.prompt_lookup_max is not None) != (self.method == "ngram"):
            raise ValueError("prompt_lookup_max is set exactly when method is ngram")
        if self.prompt_lookup_min is not None and self.prompt_lookup_max is not None \
                and self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min must be <= prompt_lookup_max")
        if self.rejection_sample_method is not None \
                and self.rejection_sample_method not in facts["rejection_sample_methods"]:
            raise ValueError(f"speculative_config.rejection_sample_method {self.rejection_sample_method!r} does not "
                             f"exist in {facts.label} (has: {facts['rejection_sample_methods']})")
        on_v1 = self.method in facts.get("v1_runner_methods", [])
        if self.rejection_sample_method == "block" and on_v1:
            raise ValueError(f"{facts.label} runs {self.method} on Model Runner V1, which has no block verification")
        ranges = self.num_speculative_tokens_per_batch_size
        if ranges is not None:
            if facts["per_batch_field"] != "num_speculative_tokens_per_batch_size":
                raise ValueError(f"speculative_config.num_speculative_tokens_per_batch_size does not exist in "
                                 f"{facts.label} (no per-batch draft length)")
            if on_v1 and self.method not in facts.get("per_batch_v1_methods", [self.method]):
                raise ValueError(f"{facts.label} runs {self.method} on Model Runner V1 and drops "
                                 "num_speculative_tokens_per_batch_size there (static num_speculative_tokens)")
            self._check_ranges(ranges)
        if self.enable_adaptive_verification is not None:
            ad = facts.get("adaptive")
            if not ad or self.method not in ad["methods"]:
                raise ValueError(f"speculative_config.enable_adaptive_verification: {facts.label} adapts "
                                 f"{ad['methods'] if ad else 'no method'}, not {self.method}")
        return self

    def _check_ranges(self, ranges) -> None:
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


class VllmConfig(_Strict):
    """The whole ``vllm.yaml`` (keys as ``vllm serve`` long options)."""

    model: str
    tensor_parallel_size: PositiveInt = 1
    data_parallel_size: Optional[PositiveInt] = None
    enable_expert_parallel: Optional[bool] = None
    max_num_seqs: PositiveInt
    max_model_len: PositiveInt
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    speculative_config: Optional[VllmSpeculativeConfig] = None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo):
        facts = facts_of(info)
        unknown = [k for k in dotted_keys(self.model_dump(exclude_none=True)) if k not in facts["keys"]]
        if unknown:
            raise ValueError(f"{facts.label} has no key {', '.join(unknown)}")
        spec = self.speculative_config
        if spec is not None and spec.num_speculative_tokens_per_batch_size and (self.data_parallel_size or 1) > 1 \
                and facts.get("per_batch_dropped_with_data_parallel"):
            raise ValueError(f"{facts.label} drops num_speculative_tokens_per_batch_size with data_parallel_size > 1")
        return self


def validate_vllm(data: dict, version: str = DEFAULT_VLLM_VERSION) -> VllmConfig:
    """Validate a ``vllm.yaml`` mapping against the keys and rules of vLLM ``version``."""
    return VllmConfig.model_validate(data, context={"vllm": engine_version("vllm", version)})


def dotted_keys(data: dict, prefix: str = "") -> list[str]:
    """``{"a": 1, "b": {"c": 2}}`` -> ``["a", "b", "b.c"]`` (the keys a facts file must cite)."""
    out = []
    for k, v in data.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += dotted_keys(v, prefix + k + ".")
    return out


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
