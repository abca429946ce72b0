"""Typed model of the TensorRT-LLM LLM-API YAML that ``trtspec build`` emits (``llm_api.yaml``).

The file is what ``trtllm-serve <model> --config llm_api.yaml`` (older alias
``--extra_llm_api_options``) and ``tensorrt_llm.LLM(model, **yaml)`` read. Only the fields trtspec
writes are modelled, each with the name, type and validation rule of the targeted TensorRT-LLM
version (its ``tensorrt_llm/llmapi/llm_args.py``); everything else is forbidden so a typo or a
field of another version fails here instead of at serve time.

Encoded versions: ``trtspec.builder.engine_facts.VERSIONS["trtllm"]``, one facts file each
(``trtspec/builder/engines/trtllm-<version>.yaml``, every fact with its ``path@commit`` or
``path@tag``; the default is the release 1.4.0rc4). Validate with the version's facts in the pydantic
context (:func:`validate_llm_api`); without one the default version's facts apply. The ``engines``
test tier feeds every bundle case through TensorRT-LLM's own ``llm_args.py`` (``tools/engines/
check_trtllm.py``). Rules carried over (every version unless stated):

* ``speculative_config.decoding_type`` is the discriminator: ``Draft_Target``, ``Eagle3``, ``MTP``,
  ``NGram``, ``SA``, ``DFlash``, ``DSpark``.
* ``draft_len_schedule`` maps an inclusive upper batch bound to a draft length
  (``{4: 4, 8: 2, 32: 1}``: batch 1-4 -> 4, 5-8 -> 2, 9-32 -> 1, above 32 -> 0, or the version's
  ``min_runtime_draft_len`` where it has one); keys >= 1, values >= 0, the value at the smallest key
  equals ``max_draft_len`` and none exceeds it; it is mutually exclusive with ``max_concurrency``.
* Dynamic draft length: only the version's ``dynamic_draft_len`` decoding types; the others take
  ``max_concurrency`` or nothing (trtspec rejects a schedule there rather than have it ignored).
* Eagle3/MTP dynamic tree: ``use_dynamic_tree`` needs ``dynamic_tree_max_topK > 0`` and
  ``max_draft_len <= max_total_draft_tokens <= topK * max_draft_len``; on linear modes the real
  code sets ``max_total_draft_tokens = max_draft_len`` (trtspec leaves it out there).
* DSpark: ``block_size`` (set or read from the draft checkpoint) must equal ``max_draft_len``.
* ``kv_cache_config.dtype`` is ``auto``, ``fp8``, ``fp8_ds_mla``, ``nvfp4`` or a torch dtype name.
* ``cuda_graph_config.batch_sizes`` sorted, ``max_batch_size == max(batch_sizes)``; every schedule
  key that is <= the largest graph batch joins the graph batch sizes (TensorRT-LLM merges them);
  trtspec writes them explicitly and turns padding on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationInfo, field_validator,
                      model_validator)

from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, EngineVersion, check_version, engine_version

#: Versions of TensorRT-LLM whose LLM-API fields are encoded (facts under trtspec/builder/engines/).
TRTLLM_VERSIONS: tuple[str, ...] = VERSIONS["trtllm"]
#: The version ``--trtllm-version`` defaults to.
DEFAULT_TRTLLM_VERSION = DEFAULT_VERSION["trtllm"]

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_ds_mla", "nvfp4", "float16", "bfloat16", "float32")


def facts_of(info: Optional[ValidationInfo]) -> EngineVersion:
    """The TensorRT-LLM facts in the validation context (``{"trtllm": EngineVersion}``), else the default's."""
    ctx = getattr(info, "context", None) or {}
    return ctx.get("trtllm") or engine_version("trtllm")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _DecodingBase(_Strict):
    """Fields shared by every ``speculative_config`` (TensorRT-LLM ``DecodingBaseConfig``)."""

    max_draft_len: NonNegativeInt = Field(description="Maximum draft tokens per step (tree depth for trees).")
    max_total_draft_tokens: Optional[int] = Field(
        default=None, description="Draft tokens in the whole tree; equals max_draft_len for a chain.")
    speculative_model: Optional[str] = Field(
        default=None, description="Draft checkpoint directory (relative to the bundle) or hub id.")
    max_concurrency: Optional[PositiveInt] = Field(
        default=None, description="Speculation is off above this batch size; exclusive with draft_len_schedule.")
    draft_len_schedule: Optional[dict[int, int]] = Field(
        default=None, description="Inclusive upper batch bound -> draft length; above the largest key: 0.")

    @field_validator("draft_len_schedule")
    @classmethod
    def _schedule_values(cls, v: Optional[dict[int, int]], info) -> Optional[dict[int, int]]:
        if v is None:
            return v
        if not v:
            raise ValueError("draft_len_schedule must not be empty (omit it instead)")
        for bs, d in v.items():
            if bs < 1:
                raise ValueError(f"draft_len_schedule: batch size threshold must be >= 1, got {bs}")
            if d < 0:
                raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {d}")
        mdl = info.data.get("max_draft_len")
        smallest = min(v)
        if mdl is not None and v[smallest] != mdl:
            raise ValueError(
                f"draft_len_schedule[{smallest}] must equal max_draft_len ({mdl}) because it is the "
                f"smallest batch-size key; got {v[smallest]}")
        if mdl is not None and any(d > mdl for d in v.values()):
            raise ValueError(f"draft_len_schedule: every draft length must be <= max_draft_len ({mdl}); got {v}")
        return dict(sorted(v.items()))

    @model_validator(mode="after")
    def _base_rules(self, info: ValidationInfo):
        if self.max_concurrency is not None and self.draft_len_schedule is not None:
            raise ValueError("max_concurrency and draft_len_schedule are mutually exclusive")
        facts = facts_of(info)
        dynamic = facts["dynamic_draft_len"]
        if self.draft_len_schedule is not None and self.decoding_type not in dynamic:
            raise ValueError(
                f"decoding_type {self.decoding_type} does not support draft_len_schedule in {facts.label} "
                f"(dynamic draft length: {sorted(dynamic)}); use max_concurrency")
        return self

    def _linear(self, name: str):
        if self.max_draft_len <= 0:
            raise ValueError(f"max_draft_len must be > 0 for {name}")
        if self.max_total_draft_tokens not in (None, self.max_draft_len):
            raise ValueError(f"{name} is linear: max_total_draft_tokens must equal max_draft_len "
                             f"({self.max_draft_len}), got {self.max_total_draft_tokens}")
        return self

    def _tree(self, name: str, use_dynamic_tree: bool, top_k: Optional[int]):
        if self.max_draft_len <= 0:
            raise ValueError(f"max_draft_len must be > 0 for {name}")
        if not use_dynamic_tree:
            if top_k is not None:
                raise ValueError(f"{name}: dynamic_tree_max_topK is set but use_dynamic_tree is false")
            return self._linear(name)
        if top_k is None or top_k <= 0:
            raise ValueError(f"{name}: dynamic_tree_max_topK must be > 0 when use_dynamic_tree is true")
        hi = top_k * self.max_draft_len
        total = self.max_total_draft_tokens
        if total is None or not (self.max_draft_len <= total <= hi):
            raise ValueError(f"{name}: max_total_draft_tokens ({total}) must be in [max_draft_len "
                             f"({self.max_draft_len}), dynamic_tree_max_topK * max_draft_len ({hi})]")
        return self


class DraftTargetDecodingConfig(_DecodingBase):
    """A separate draft model (``decoding_type: Draft_Target``); linear chain only."""

    decoding_type: Literal["Draft_Target"] = "Draft_Target"

    @model_validator(mode="after")
    def _check(self):
        if self.speculative_model is None:
            raise ValueError("speculative_model must be specified for Draft_Target")
        return self._linear("Draft_Target")


class Eagle3DecodingConfig(_DecodingBase):
    """An EAGLE-3 head (one-model) reading hidden states of ``eagle3_layers_to_capture``."""

    decoding_type: Literal["Eagle3"] = "Eagle3"
    use_dynamic_tree: bool = False
    dynamic_tree_max_topK: Optional[int] = None
    eagle3_layers_to_capture: Optional[list[int]] = Field(
        default=None, description="Target layer indices feeding the head; default {1, L//2-1, L-4}.")

    @model_validator(mode="after")
    def _check(self):
        if self.speculative_model is None:
            raise ValueError("Draft model must be provided for EAGLE (speculative_model)")
        return self._tree("Eagle3", self.use_dynamic_tree, self.dynamic_tree_max_topK)


class MTPDecodingConfig(_DecodingBase):
    """Multi-token-prediction layers embedded in the target (``speculative_model`` unset)."""

    decoding_type: Literal["MTP"] = "MTP"
    use_dynamic_tree: bool = False
    dynamic_tree_max_topK: Optional[int] = None

    @model_validator(mode="after")
    def _check(self):
        return self._tree("MTP", self.use_dynamic_tree, self.dynamic_tree_max_topK)


class NGramDecodingConfig(_DecodingBase):
    """Prompt-lookup n-gram drafting (no draft model)."""

    decoding_type: Literal["NGram"] = "NGram"
    max_matching_ngram_size: PositiveInt = 2
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    @model_validator(mode="after")
    def _check(self):
        return self._linear("NGram")


class SADecodingConfig(_DecodingBase):
    """Suffix-automaton drafting (no draft model); ``max_matching_ngram_size`` -1 = longest match."""

    decoding_type: Literal["SA"] = "SA"
    max_matching_ngram_size: int = -1
    enable_global_pool: bool = False

    @model_validator(mode="after")
    def _check(self):
        if self.max_matching_ngram_size == 0:
            raise ValueError("max_matching_ngram_size must be > 0 (fixed n-gram) or -1 (longest match)")
        return self._linear("SA")


class DFlashDecodingConfig(_DecodingBase):
    """DFlash block-parallel draft attending to ``target_layer_ids`` hidden states."""

    decoding_type: Literal["DFlash"] = "DFlash"
    target_layer_ids: Optional[list[int]] = None
    mask_token_id: Optional[int] = None

    @model_validator(mode="after")
    def _check(self):
        if self.speculative_model is None:
            raise ValueError("speculative_model must be specified for DFlash")
        return self._linear("DFlash")


class DSparkDecodingConfig(_DecodingBase):
    """DSpark semi-parallel draft; ``block_size`` must equal ``max_draft_len``. Unset ``target_layer_ids``,
    ``mask_token_id``, ``block_size`` and ``markov_rank`` are read from the draft's config.json, where the
    version reads them (engine fact ``dspark_reads``)."""

    decoding_type: Literal["DSpark"] = "DSpark"
    target_layer_ids: Optional[list[int]] = None
    mask_token_id: Optional[int] = None
    block_size: Optional[PositiveInt] = None
    markov_rank: Optional[NonNegativeInt] = None

    @model_validator(mode="after")
    def _check(self):
        if self.speculative_model is None:
            raise ValueError("speculative_model must be specified for DSpark")
        if self.block_size is not None and self.block_size != self.max_draft_len:
            raise ValueError(f"DSpark block_size ({self.block_size}) must equal max_draft_len ({self.max_draft_len})")
        return self._linear("DSpark")


SpeculativeConfig = Annotated[
    Union[DraftTargetDecodingConfig, Eagle3DecodingConfig, MTPDecodingConfig, NGramDecodingConfig,
          SADecodingConfig, DFlashDecodingConfig, DSparkDecodingConfig],
    Field(discriminator="decoding_type"),
]


class KvCacheConfig(_Strict):
    """``kv_cache_config``: cache dtype (``fp8`` stores K/V in FP8 E4M3) and memory fraction."""

    dtype: str = "auto"
    free_gpu_memory_fraction: float = Field(default=0.9, ge=0.0, le=1.0)
    enable_block_reuse: bool = True

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        v = v.lower()
        if v not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_config.dtype must be one of {KV_CACHE_DTYPES}, got {v!r}")
        return v


class CudaGraphConfig(_Strict):
    """``cuda_graph_config``: batch sizes captured as CUDA graphs (sorted, max = max_batch_size)."""

    batch_sizes: list[PositiveInt]
    max_batch_size: PositiveInt
    enable_padding: bool = True

    @model_validator(mode="after")
    def _check(self):
        if list(self.batch_sizes) != sorted(set(self.batch_sizes)):
            raise ValueError(f"cuda_graph_config.batch_sizes must be sorted and unique, got {self.batch_sizes}")
        if self.max_batch_size != max(self.batch_sizes):
            raise ValueError(f"cuda_graph_config.max_batch_size ({self.max_batch_size}) must equal "
                             f"max(batch_sizes) ({max(self.batch_sizes)})")
        return self


class LlmApiConfig(_Strict):
    """The whole ``llm_api.yaml``; cross-field rules between the blocks are checked here."""

    tensor_parallel_size: PositiveInt = 1
    moe_expert_parallel_size: Optional[PositiveInt] = None
    moe_tensor_parallel_size: Optional[PositiveInt] = None
    max_batch_size: PositiveInt
    max_seq_len: PositiveInt
    max_num_tokens: Optional[PositiveInt] = None
    kv_cache_config: KvCacheConfig = KvCacheConfig()
    cuda_graph_config: Optional[CudaGraphConfig] = None
    speculative_config: Optional[SpeculativeConfig] = None

    @model_validator(mode="after")
    def _cross(self, info: ValidationInfo):
        ep, mtp = self.moe_expert_parallel_size, self.moe_tensor_parallel_size
        if ep is not None or mtp is not None:
            if not facts_of(info).get("expert_parallel"):
                raise ValueError(f"{facts_of(info).label} has no moe_expert_parallel_size")
            if (ep or 1) * (mtp or 1) != self.tensor_parallel_size:
                raise ValueError(f"moe_expert_parallel_size ({ep}) x moe_tensor_parallel_size ({mtp}) must equal "
                                 f"tensor_parallel_size ({self.tensor_parallel_size})")
        cg, spec = self.cuda_graph_config, self.speculative_config
        if cg is not None and cg.max_batch_size > self.max_batch_size:
            raise ValueError(f"cuda_graph_config.max_batch_size ({cg.max_batch_size}) exceeds max_batch_size "
                             f"({self.max_batch_size})")
        if spec is not None and spec.draft_len_schedule and cg is not None:
            missing = [k for k in spec.draft_len_schedule if k <= cg.max_batch_size and k not in cg.batch_sizes]
            if missing:
                raise ValueError(f"cuda_graph_config.batch_sizes must include every draft_len_schedule threshold; "
                                 f"missing {missing}")
            if not cg.enable_padding:
                raise ValueError("draft_len_schedule with CUDA graphs needs cuda_graph_config.enable_padding: true")
        if spec is not None and self.max_num_tokens is not None:
            need = self.max_batch_size * (1 + (spec.max_total_draft_tokens or spec.max_draft_len))
            if self.max_num_tokens < min(need, self.max_seq_len):
                raise ValueError(f"max_num_tokens ({self.max_num_tokens}) cannot hold one decode step of "
                                 f"max_batch_size requests with drafts ({need})")
        return self


def default_graph_batch_sizes(max_batch_size: int) -> list[int]:
    """TensorRT-LLM's padded CUDA-graph batch sizes up to ``max_batch_size``: 1, 2, 4, 8, 16, ..., 128,
    then steps of 64, and ``max_batch_size`` itself."""
    sizes = [1, 2, 4] + [8 * i for i in range(1, 17)]
    while sizes[-1] + 64 <= max_batch_size:
        sizes.append(sizes[-1] + 64)
    sizes = [s for s in sizes if s <= max_batch_size]
    if not sizes or sizes[-1] != max_batch_size:
        sizes.append(max_batch_size)
    return sizes


def graph_batch_sizes(max_batch_size: int, schedule: Optional[dict[int, int]]) -> list[int]:
    """Default graph batch sizes plus every schedule threshold <= ``max_batch_size`` (sorted, unique)."""
    sizes = set(default_graph_batch_sizes(max_batch_size))
    sizes.update(k for k in (schedule or {}) if k <= max_batch_size)
    return sorted(sizes)


def check_trtllm_version(version: str) -> str:
    """Return ``version`` if encoded here, else raise naming ``--trtllm-version`` and the known ones."""
    return check_version("trtllm", version)


def validate_llm_api(data: dict, version: str = DEFAULT_TRTLLM_VERSION) -> LlmApiConfig:
    """Validate an ``llm_api.yaml`` mapping against the fields and rules of TensorRT-LLM ``version``."""
    return LlmApiConfig.model_validate(data, context={"trtllm": engine_version("trtllm", version)})


def validate_llm_api_yaml(path: Path | str, version: str = DEFAULT_TRTLLM_VERSION) -> LlmApiConfig:
    """Load an emitted ``llm_api.yaml`` and validate it against the models of ``version``."""
    import yaml

    check_trtllm_version(version)
    return validate_llm_api(yaml.safe_load(Path(path).read_text()), version)
