"""Stage 5 of ``trtspec build``: serving configs from the recipe, each validated before it is written.

Paths inside the configs are relative to the bundle (``./target``, ``./draft``): the serve
commands in the bundle's README run from the bundle directory, so the bundle can be moved.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

from trtspec.builder.sglang_config import SGLANG_ALGORITHMS, SglangArgs
from trtspec.builder.trtllm_config import (DYNAMIC_DRAFT_LEN_TYPES, TRTLLM_VERSIONS, CudaGraphConfig, KvCacheConfig,
                                           LlmApiConfig, graph_batch_sizes)
from trtspec.builder.vllm_config import VLLM_METHODS, VllmConfig, VllmSpeculativeConfig, schedule_to_ranges

DECODING_TYPES = {"draft_model": "Draft_Target", "eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram", "sa": "SA",
                  "dflash": "DFlash", "dspark": "DSpark"}
TARGET_DIR, DRAFT_DIR = "./target", "./draft"


def _schedule(recipe: Any) -> Optional[dict[int, int]]:
    s = getattr(recipe, "draft_len_schedule", None)
    return {int(k): int(v) for k, v in s.items()} if s else None


def _tree(recipe: Any, drafter: str) -> Optional[tuple[int, int]]:
    """(top_k, total draft tokens) when the recipe chose a tree for an Eagle3/MTP drafter."""
    sg = getattr(recipe, "sglang", None) or {}
    k = int(sg.get("speculative_eagle_topk", 1) or 1)
    if drafter not in ("eagle3", "mtp") or k <= 1:
        return None
    total = int(sg.get("speculative_num_draft_tokens", 0)) - 1  # SGLang counts the root token
    d = int(recipe.max_draft_len)
    return k, min(max(total, d), k * d)


def llm_api_config(recipe: Any, opts: Any, *, draft_layer_ids: Optional[list[int]] = None,
                   notes: Optional[list[str]] = None) -> LlmApiConfig:
    """The ``llm_api.yaml`` content for ``opts.drafter`` under ``recipe`` (validated)."""
    notes = notes if notes is not None else []
    dtype = DECODING_TYPES[opts.drafter]
    d = int(recipe.max_draft_len)
    schedule = _schedule(recipe)
    max_conc = getattr(recipe, "max_concurrency", None)
    spec: dict[str, Any] = {"decoding_type": dtype, "max_draft_len": d}
    if schedule and dtype not in DYNAMIC_DRAFT_LEN_TYPES:
        on = [k for k, v in schedule.items() if v > 0]
        max_conc = max(on) if on else None
        notes.append(f"{dtype} has no dynamic draft length in TensorRT-LLM: schedule {schedule} emitted as "
                     f"max_draft_len {d} with max_concurrency {max_conc}")
        schedule = None
    if schedule:
        spec["draft_len_schedule"] = schedule
    elif max_conc:
        spec["max_concurrency"] = int(max_conc)
    if opts.drafter in ("draft_model", "eagle3", "dflash", "dspark"):
        spec["speculative_model"] = DRAFT_DIR
    tree = _tree(recipe, opts.drafter)
    if tree:
        spec.update(use_dynamic_tree=True, dynamic_tree_max_topK=tree[0], max_total_draft_tokens=tree[1])
    else:
        spec["max_total_draft_tokens"] = d
    if opts.drafter == "eagle3" and draft_layer_ids:
        spec["eagle3_layers_to_capture"] = list(draft_layer_ids)
    if opts.drafter in ("dflash", "dspark") and draft_layer_ids:
        spec["target_layer_ids"] = list(draft_layer_ids)
    if opts.drafter == "dspark":
        spec["block_size"] = d
    if opts.drafter == "ngram":
        spec["max_matching_ngram_size"] = 3
    cg = CudaGraphConfig(batch_sizes=graph_batch_sizes(opts.max_batch_size, schedule),
                         max_batch_size=opts.max_batch_size, enable_padding=True)
    return LlmApiConfig.model_validate({
        "tensor_parallel_size": opts.tp,
        "max_batch_size": opts.max_batch_size,
        "max_seq_len": opts.max_seq_len,
        "kv_cache_config": KvCacheConfig(dtype="fp8" if opts.kv_cache_quant == "fp8" else "auto"),
        "cuda_graph_config": cg,
        "speculative_config": spec,
    })


def vllm_config(recipe: Any, opts: Any) -> Optional[VllmConfig]:
    """The ``vllm.yaml`` content, or None when vLLM has no equivalent of ``opts.drafter``."""
    method = VLLM_METHODS.get(opts.drafter)
    if method is None:
        return None
    sched = getattr(recipe, "vllm_schedule", None) or _schedule(recipe)
    sched = {int(k): int(v) for k, v in (sched or {}).items()}
    k = sched[min(sched)] if sched else int(recipe.max_draft_len)
    spec: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if method in ("draft_model", "eagle3", "dflash"):
        spec["model"] = DRAFT_DIR
    if method == "ngram":
        spec.update(prompt_lookup_max=3, prompt_lookup_min=1)
    if sched:
        spec["num_speculative_tokens_per_batch_size"] = schedule_to_ranges(sched)
    return VllmConfig(model=TARGET_DIR, tensor_parallel_size=opts.tp, max_num_seqs=opts.max_batch_size,
                      max_model_len=opts.max_seq_len, kv_cache_dtype="fp8" if opts.kv_cache_quant == "fp8" else "auto",
                      speculative_config=VllmSpeculativeConfig.model_validate(spec))


def sglang_args(recipe: Any, opts: Any) -> Optional[SglangArgs]:
    """The ``sglang.args`` content, or None when SGLang has no equivalent of ``opts.drafter``."""
    algo = SGLANG_ALGORITHMS.get(opts.drafter)
    sg = getattr(recipe, "sglang", None)
    if algo is None or not sg:
        return None
    return SglangArgs(
        model_path=TARGET_DIR, tp_size=opts.tp, max_running_requests=opts.max_batch_size,
        context_length=opts.max_seq_len, kv_cache_dtype="fp8_e4m3" if opts.kv_cache_quant == "fp8" else "auto",
        speculative_algorithm=algo, speculative_num_steps=int(sg["speculative_num_steps"]),
        speculative_eagle_topk=int(sg.get("speculative_eagle_topk", 1)),
        speculative_num_draft_tokens=int(sg["speculative_num_draft_tokens"]),
        speculative_draft_model_path=DRAFT_DIR if algo in ("EAGLE3", "STANDALONE") else None)


def dump_yaml(data: dict, path: Path, header: str) -> None:
    """Write ``data`` as block-style YAML with a comment header (keys in insertion order)."""
    text = "".join(f"# {line}\n" for line in header.splitlines())
    text += yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    path.write_text(text)


def write_configs(bundle: Path, recipe: Any, opts: Any, *, draft_layer_ids=None) -> dict[str, Any]:
    """Write ``llm_api.yaml``, ``vllm.yaml``, ``sglang.args`` into ``bundle``; return what was written
    (``{"llm_api": LlmApiConfig, "vllm": VllmConfig | None, "sglang": SglangArgs | None, "notes": [...]}``)."""
    notes: list[str] = []
    llm = llm_api_config(recipe, opts, draft_layer_ids=draft_layer_ids, notes=notes)
    commit = TRTLLM_VERSIONS[opts.trtllm_version]
    data = llm.model_dump(exclude_none=True)
    if "speculative_config" in data:  # decoding_type first: it selects the config class
        sc = data["speculative_config"]
        data["speculative_config"] = {"decoding_type": sc.pop("decoding_type"), **sc}
    dump_yaml(data, bundle / "llm_api.yaml",
              f"TensorRT-LLM LLM-API options (trtllm-serve ./target --config llm_api.yaml), run from the bundle.\n"
              f"Fields follow TensorRT-LLM {opts.trtllm_version} (llm_args.py at {commit[:12]}).")
    vl = vllm_config(recipe, opts)
    if vl is not None:
        dump_yaml(vl.model_dump(exclude_none=True, mode="json"), bundle / "vllm.yaml",
                  "vLLM options (vllm serve --config vllm.yaml), run from the bundle.")
    else:
        notes.append(f"vLLM has no {opts.drafter} method: vllm.yaml not written")
    sg = sglang_args(recipe, opts)
    if sg is not None:
        (bundle / "sglang.args").write_text(sg.to_text())
    else:
        notes.append(f"SGLang has no {opts.drafter} algorithm in this recipe: sglang.args not written")
    return {"llm_api": llm, "vllm": vl, "sglang": sg, "notes": notes}


def readme(opts: Any, written: dict[str, Any], recipe: Any, extra: list[str]) -> str:
    """The bundle's ``README.md``: what is inside and the exact serve commands."""
    llm = written["llm_api"]
    spec = llm.speculative_config
    sched_text = (f"draft_len_schedule {spec.draft_len_schedule} (above the largest key: no speculation)"
                  if spec.draft_len_schedule else
                  f"max_draft_len {spec.max_draft_len}, max_concurrency {spec.max_concurrency}")
    lines = [
        "# trtspec bundle",
        "",
        f"Target quantization `{opts.quant}`, KV cache `{opts.kv_cache_quant}`, drafter `{opts.drafter}`"
        f" (TensorRT-LLM `decoding_type: {spec.decoding_type}`), planned for {opts.gpu} x{opts.tp}.",
        f"Draft length per batch size: {sched_text}.",
        "",
        "Run every command from this directory (paths in the configs are relative to it).",
        "",
        "## TensorRT-LLM (PyTorch backend)",
        "```bash",
        "trtllm-serve ./target --config llm_api.yaml",
        "```",
        "or in Python: `tensorrt_llm.LLM(model='./target', **yaml.safe_load(open('llm_api.yaml')))`.",
    ]
    if written["vllm"] is not None:
        lines += ["", "## vLLM", "```bash", "vllm serve ./target --config vllm.yaml", "```"]
    if written["sglang"] is not None:
        lines += ["", "## SGLang", "```bash", "python -m sglang.launch_server $(cat sglang.args)", "```"]
    lines += ["", "## Files", "- `target/`: target checkpoint (unified Hugging Face layout"
              + (", Model-Optimizer quantized)" if opts.quant != "none" or opts.kv_cache_quant != "none" else ")")]
    if opts.drafter in ("draft_model", "eagle3", "dflash", "dspark"):
        lines.append("- `draft/`: draft checkpoint" + (f" ({opts.draft_quant})" if opts.draft_quant != "none" else ""))
    lines += ["- `recipe.yaml`: the recipe (draft length per batch, predicted speedups, binding rules)",
              "- `manifest.json`: sha256 of inputs and of every file here, tool versions"]
    for note in written["notes"] + extra:
        lines.append(f"- note: {note}")
    return "\n".join(lines) + "\n"
