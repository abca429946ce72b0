"""Options of one ``trtspec build``: the single source of the CLI's defaults and help texts."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from trtspec.bench.runners import RunConfig
from trtspec.builder.engine_facts import DEFAULT_VERSION, EngineFactsError, check_version
from trtspec.parallel import DEFAULTS as PARALLEL, HELP as PARALLEL_HELP, Parallelism

DRAFTERS = ("draft_model", "eagle3", "mtp", "dflash", "dspark", "ngram", "sa")
QUANTS = ("none", "fp8", "nvfp4", "w4a16_nvfp4", "int4_awq", "w4a8_awq", "int8_sq")
KV_QUANTS = ("none", "fp8")
BACKENDS = ("trtllm", "tensorrt")
#: drafters whose step graphs --backend tensorrt exports (trtspec.onnx.export.DRAFTERS).
TENSORRT_DRAFTERS = ("draft_model", "eagle3")
#: how the target verifies a draft: the verification node of the --backend tensorrt target graph
#: (trtspec.onnx.tiers.VERIFY_NODES), and for the serving engines' configs block verification (Sun et al.) or
#: their per-token rejection sampler (greedy and sample: requests pick greedy or sampled decoding at run time).
VERIFY_METHODS = ("greedy", "sample", "block")
#: static: each engine's per-batch draft length (or one setting); adaptive: the engine's own adaptive mode where the
#: version has one (vLLM enable_adaptive_verification for DSpark, SGLang --speculative-adaptive for EAGLE-3 chains),
#: and the trtspec runtime's controller in the bundle's Triton model (each step's draft lengths from measured step
#: costs and live acceptance).
SPECULATION_MODES = ("static", "adaptive")
#: --quant -> the Q/DQ format of the ONNX graphs of --backend tensorrt (trtspec.onnx.qdq.QUANT_FORMATS).
TENSORRT_QUANTS = {"none": "none", "fp8": "fp8", "int8_sq": "int8", "int4_awq": "int4_awq"}
#: drafters whose draft is a separate checkpoint (``--draft`` required).
DRAFTERS_WITH_DRAFT = ("draft_model", "eagle3", "dflash", "dspark")
#: drafters whose draft is a head in Model-Optimizer's speculative layout (copied, never quantized here).
HEAD_DRAFTERS = ("eagle3", "dflash", "dspark")


def default_cache_dir() -> Path:
    """``$TRTSPEC_CACHE_DIR`` or ``~/.cache/trtspec/quantized``."""
    env = os.environ.get("TRTSPEC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "trtspec" / "quantized"


class BuildOptions(BaseModel):
    """Everything ``trtspec build`` needs. Paths are resolved at validation time, not here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: Optional[Path] = Field(default=None, description="Target HF checkpoint directory (default: demo pair).")
    draft: Optional[Path] = Field(default=None, description="Draft checkpoint / head directory (draft_model, eagle3, "
                                  "dflash, dspark).")
    drafter: Literal[DRAFTERS] = Field(default="draft_model", description="Speculation mechanism.")
    quant: Literal[QUANTS] = Field(default="fp8", description="Target weight/activation format (Model-Optimizer PTQ); "
                                   "fp8 is the H200-native default and keeps a CPU fake-quant check.")
    draft_quant: Literal[QUANTS] = Field(default="none", description="Draft-model format (draft_model drafter only).")
    kv_cache_quant: Literal[KV_QUANTS] = Field(default="none", description="KV-cache format (fp8: E4M3 K/V with "
                                               "calibrated scales).")
    calib: Optional[Path] = Field(default=None, description="Calibration texts (.jsonl with text/prompt/turns, or "
                                  ".parquet); default: the built-in sample.")
    calib_samples: PositiveInt = Field(default=32, description="Calibration sequences.")
    calib_seq_len: PositiveInt = Field(default=256, description="Tokens per calibration sequence (truncation).")
    gpu: str = Field(default="h200", description="GPU the recipe is planned for (recipe catalog name).")
    tp: PositiveInt = Field(default=PARALLEL.tp, description=PARALLEL_HELP["tp"])
    ep: PositiveInt = Field(default=PARALLEL.ep, description=PARALLEL_HELP["ep"] + " Written as each engine's own "
                            "setting: TensorRT-LLM moe_expert_parallel_size / moe_tensor_parallel_size, SGLang "
                            "--ep-size, vLLM enable_expert_parallel (only where --ep equals --tp).")
    max_batch_size: PositiveInt = Field(default=256, description="Largest batch the server runs.")
    max_seq_len: Optional[PositiveInt] = Field(default=None, description="Prompt + output tokens per request "
                                               "(None: min(4096, the target's max_position_embeddings)).")
    recipe: str = Field(default="auto", description="auto (plan now), a recipe YAML file, or a recipe-book name.")
    calibration: Optional[Path] = Field(default=None, description="For --recipe auto: a deployment calibration "
                                        "from `trtspec calibrate` (the engine figures fitted to your own measured "
                                        "points; it must match the target, --gpu, --tp and --quant, and the recipe "
                                        "is planned for its engine) or a cost_table.json from `trtspec profile`.")
    acceptance: Optional[str] = Field(default=None, description="Acceptance for --recipe auto: a profile JSON, "
                                      "prior:NAME, rates=a1,a2,..., curve=AL1,AL2,... (mean AL at D=1,2,...) or "
                                      "al=A@D; or 'measure': run the pair on the local runtime with the built-in "
                                      "sample now, write acceptance.json into the bundle and plan from it (default "
                                      "for the demo: its shipped acceptance.json).")
    measure_prompts: Optional[PositiveInt] = Field(default=None, description="--acceptance measure: the first N "
                                                   "prompts of each category of the built-in sample (None: all).")
    measure_new_tokens: PositiveInt = Field(default=RunConfig.max_new_tokens, description="--acceptance measure: "
                                            "tokens generated per turn.")
    trtllm_version: str = Field(default=DEFAULT_VERSION["trtllm"], description="TensorRT-LLM version llm_api.yaml "
                                "targets (a release such as 1.4.0rc4, or an encoded main-branch read; facts in "
                                "trtspec/builder/engines/).")
    vllm_version: str = Field(default=DEFAULT_VERSION["vllm"], description="vLLM version vllm.yaml targets (a "
                              "release such as 0.33.0, or an encoded main-branch read).")
    sglang_version: str = Field(default=DEFAULT_VERSION["sglang"], description="SGLang version sglang.args targets.")
    speculation: Literal[SPECULATION_MODES] = Field(default="static", description="static: the planned per-batch "
                                                    "draft lengths; adaptive: also each engine's own adaptive mode "
                                                    "where its version has one (the bundle README says where the "
                                                    "schedule stays static), and the bundle's Triton model chooses "
                                                    "each step's draft lengths on the trtspec runtime.")
    device: Literal["cpu", "cuda"] = Field(default="cpu", description="Where calibration runs.")
    out: Path = Field(default=Path("trtspec-out/demo"), description="Bundle directory (written atomically).")
    cache_dir: Path = Field(default_factory=default_cache_dir, description="Cache of quantized checkpoints.")
    use_cache: bool = Field(default=True, description="Reuse / fill the quantized-checkpoint cache.")
    seed: int = Field(default=0, description="Calibration sample order seed.")
    backend: Literal[BACKENDS] = Field(default="trtllm", description="trtllm: TensorRT-LLM bundle; tensorrt: "
                                       "also ONNX step graphs with trtspec plugin nodes and TensorRT engines (or "
                                       "a trtexec script where TensorRT is missing).")
    verify: Literal[VERIFY_METHODS] = Field(default="greedy", description="How the target verifies drafts. "
                                            "--backend tensorrt: the target graph ends in TrtSpecVerifyGreedy (greedy), "
                                            "TrtSpecVerifySample (sample: lossless rejection sampling, trees) or "
                                            "TrtSpecVerifyBlock (block: chains). Serving engines' configs: block "
                                            "writes block verification where the engine version has it (vLLM "
                                            "rejection_sample_method: block; n-gram falls back to per-token); greedy "
                                            "and sample keep the engine's per-token rejection sampler.")

    @model_validator(mode="after")
    def _check(self):
        for engine in ("trtllm", "vllm", "sglang"):
            try:
                check_version(engine, getattr(self, f"{engine}_version"))
            except EngineFactsError as e:
                raise ValueError(str(e)) from None
        Parallelism(tp=self.tp, ep=self.ep)
        if self.drafter in DRAFTERS_WITH_DRAFT and self.draft is None and self.target is not None:
            raise ValueError(f"--draft is required for --drafter {self.drafter}")
        if self.drafter not in DRAFTERS_WITH_DRAFT and self.draft is not None:
            raise ValueError(f"--draft must not be given for --drafter {self.drafter} (it has no draft checkpoint)")
        if self.draft_quant != "none" and self.drafter != "draft_model":
            raise ValueError(f"--draft-quant applies to --drafter draft_model only; the {self.drafter} draft is "
                             "bundled as exported by Model-Optimizer's speculative export")
        if self.backend == "tensorrt" and self.drafter not in TENSORRT_DRAFTERS:
            raise ValueError(f"--backend tensorrt exports step graphs for --drafter {' or '.join(TENSORRT_DRAFTERS)}; "
                             f"got --drafter {self.drafter}")
        if self.backend == "tensorrt" and self.drafter == "eagle3" and self.verify != "greedy":
            raise ValueError(f"--backend tensorrt exports EAGLE-3 step graphs with --verify greedy; got --verify "
                             f"{self.verify} (use --drafter draft_model for sampled or block graphs)")
        if self.backend == "tensorrt" and self.quant not in TENSORRT_QUANTS:
            raise ValueError(f"--backend tensorrt supports --quant {', '.join(TENSORRT_QUANTS)}; got {self.quant}")
        if self.calibration is not None and self.recipe != "auto":
            raise ValueError(f"--calibration applies to --recipe auto (planning now), got --recipe {self.recipe}")
        if self.acceptance == "measure" and self.recipe != "auto":
            raise ValueError(f"--acceptance measure plans the recipe from the measurement: it needs --recipe auto, "
                             f"got --recipe {self.recipe}")
        if self.acceptance != "measure" and self.measure_prompts is not None:
            raise ValueError("--measure-prompts applies to --acceptance measure only")
        if self.max_seq_len is not None and self.calib_seq_len > self.max_seq_len:
            raise ValueError(f"--calib-seq-len ({self.calib_seq_len}) exceeds --max-seq-len ({self.max_seq_len})")
        return self


def help_of(field: str) -> str:
    """The help text of a ``BuildOptions`` field, with its default."""
    info = BuildOptions.model_fields[field]
    default = info.get_default(call_default_factory=True)
    return f"{info.description} [default: {default}]"
