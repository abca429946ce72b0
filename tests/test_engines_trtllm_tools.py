"""The TensorRT-LLM side of the ``engines`` tier that runs everywhere: the source layout refuses a file that is not the
listed one (length, sha256) and says where to read a missing one, and the comparison of what was written with what
the engine resolved finds a changed field (schedule keys as JSON strings and set-typed fields compare equal)."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import yaml
from engines_helpers import TOOLS, unchanged_trtllm


def sources_module():
    spec = importlib.util.spec_from_file_location("trtllm_sources", TOOLS / "trtllm_sources.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def entry(text: str) -> dict:
    return {"path": "x.py", "repo": "NVIDIA/TensorRT-LLM", "commit": "0" * 40, "file": "pkg/x.py",
            "chars": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def test_sources_are_checked_by_length_and_digest_and_missing_ones_say_where_to_read_them():
    src = sources_module()
    good = "class A:\n    pass\n"
    assert src.problem(good, entry(good)) is None
    assert "differs from pkg/x.py@0000000: 19 characters" in src.problem(good + "#", entry(good))
    assert src.problem(None, entry(good)) == (f"missing: read NVIDIA/TensorRT-LLM pkg/x.py at {'0' * 40}, "
                                              f"{len(good)} characters")


def test_sources_manifest_lists_the_llm_args_the_tier_runs():
    src = sources_module()
    files = {e["path"]: e for e in src.manifest("main-0004396")}
    assert files["tensorrt_llm/llmapi/llm_args.py"]["commit"].startswith("0004396")
    assert files["tensorrt_llm/llmapi/llm_args.py"]["chars"] == 314102
    assert "SpeculativeDecodingMode" in files["interface_SpeculativeDecodingMode.py"]["excerpt"]


def test_unchanged_trtllm_names_every_field_the_engine_resolved_differently(tmp_path: Path):
    written = {"max_batch_size": 64, "kv_cache_config": {"dtype": "fp8"},
               "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4,
                                      "draft_len_schedule": {4: 4, 64: 1}, "eagle3_layers_to_capture": [1, 3, 5]}}
    (tmp_path / "llm_api.yaml").write_text(yaml.safe_dump(written))
    resolved = {"max_batch_size": 64, "kv_cache_config": {"dtype": "fp8", "free_gpu_memory_fraction": 0.9},
                "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4, "max_total_draft_tokens": 4,
                                       "draft_len_schedule": {"4": 4, "64": 1}, "eagle3_layers_to_capture": [5, 1, 3]}}
    assert unchanged_trtllm(tmp_path, {"resolved": resolved}) == []
    resolved["kv_cache_config"]["dtype"] = "auto"
    resolved["speculative_config"]["draft_len_schedule"] = {"4": 4, "64": 0}
    assert unchanged_trtllm(tmp_path, {"resolved": resolved}) == [
        "kv_cache_config.dtype: wrote 'fp8', engine 'auto'",
        "speculative_config.draft_len_schedule: wrote {4: 4, 64: 1}, engine {'4': 4, '64': 0}"]

