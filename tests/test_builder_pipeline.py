"""Full ``trtspec build`` runs on tiny random Llama models (hidden 128, intermediate 256): every quant
format Model-Optimizer handles on CPU, the draft_model / eagle3 / ngram drafters, atomicity and the cache."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from runtime_fixtures import make_eagle3, make_model
from safetensors import safe_open
from test_builder_configs import FakeRecipe

from trtspec.builder import pipeline
from trtspec.builder.bundle import hash_files
from trtspec.builder.options import BuildOptions
from trtspec.builder.quantize import EXPORTED_QUANT_ALGO
from trtspec.builder.trtllm_config import validate_llm_api_yaml


def fake_resolver(spec, **kw):
    assert spec == "auto" and kw["gpu"] == "h200"
    return FakeRecipe()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    target = make_model(root / "target", hidden=128, seed=0)
    draft = make_model(root / "draft", hidden=128, seed=1)
    return target, draft


def run(tmp_path, target, draft=None, **kw):
    kw.setdefault("calib_samples", 2 if "awq" in kw.get("quant", "") else 4)  # AWQ's search is the slow part
    opts = BuildOptions(target=target, draft=draft, out=tmp_path / "bundle", cache_dir=tmp_path / "cache",
                        calib_seq_len=32, **kw)
    return pipeline.build(opts, quiet=True, recipe_resolver=fake_resolver)


def tensors(ckpt: Path) -> dict[str, tuple[str, list[int]]]:
    out = {}
    for f in ckpt.glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                sl = st.get_slice(k)
                out[k] = (sl.get_dtype(), list(sl.get_shape()))
    return out


# weight dtype and scale tensors of a quantized linear (model.layers.0.mlp.down_proj, in 256 -> out 128)
EXPECTED_LINEAR = {
    "fp8": {"weight": ("F8_E4M3", [128, 256]), "weight_scale": ("F32", []), "input_scale": ("F32", [])},
    "int4_awq": {"weight": ("U8", [64, 256]), "weight_scale": ("F32", [128, 2])},
    "w4a8_awq": {"weight": ("U8", [64, 256])},
    "int8_sq": {"weight": ("I8", [128, 256])},
    "nvfp4": {"weight": ("U8", [128, 128]), "weight_scale": ("F8_E4M3", [128, 16]), "weight_scale_2": ("F32", [])},
    "w4a16_nvfp4": {"weight": ("U8", [128, 128]), "weight_scale": ("F8_E4M3", [128, 16])},
}


@pytest.mark.parametrize("quant", ["fp8", "int4_awq", "w4a8_awq", "int8_sq", "nvfp4", "w4a16_nvfp4"])
def test_draft_model_build_per_quant(tmp_path, pair, quant):
    target, draft = pair
    res = run(tmp_path, target, draft, quant=quant)
    b = res.out
    cfg = json.loads((b / "target" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["quantization_config"]["quant_method"] == "modelopt"
    assert cfg["quantization_config"]["quant_algo"] == EXPORTED_QUANT_ALGO[quant]
    got = tensors(b / "target")
    for suffix, want in EXPECTED_LINEAR[quant].items():
        assert got[f"model.layers.0.mlp.down_proj.{suffix}"] == want, suffix
    # every source tensor is still there (quantized linears keep their names, scales are added)
    assert set(tensors(target)) <= set(got)
    assert (b / "target" / "tokenizer.json").read_bytes() == (target / "tokenizer.json").read_bytes()
    # unquantized draft copied bit for bit
    assert hash_files(b / "draft", [b / "draft" / "model.safetensors"]) == \
        hash_files(draft, [draft / "model.safetensors"])
    llm = validate_llm_api_yaml(b / "llm_api.yaml")
    assert llm.speculative_config.decoding_type == "Draft_Target"
    # the planned {4: 4, 16: 3, 48: 1}: D=1, not 0, above 48 (one-engine Draft_Target, no runtime floor)
    assert llm.speculative_config.draft_len_schedule == {4: 4, 16: 3, 256: 1}
    m = json.loads((b / "manifest.json").read_text())
    assert m["format"] == "trtspec.bundle/v1" and m["quant"]["target"] == quant
    assert m["outputs"] == {k: v for k, v in hash_files(b).items() if k != "manifest.json"}
    assert set(m["versions"]) >= {"trtspec", "torch", "modelopt", "transformers"}
    if quant in ("nvfp4", "w4a16_nvfp4"):
        assert "needs CUDA" in m["quant_checks"]["target"]
    else:
        assert "top-1 agreement" in m["quant_checks"]["target"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle.")]


def test_draft_quant_and_fp8_kv_cache(tmp_path, pair):
    target, draft = pair
    res = run(tmp_path, target, draft, quant="int8_sq", draft_quant="fp8", kv_cache_quant="fp8")
    qt = json.loads((res.out / "target" / "config.json").read_text())["quantization_config"]
    qd = json.loads((res.out / "draft" / "config.json").read_text())["quantization_config"]
    fp8_kv = {"dynamic": False, "num_bits": 8, "type": "float"}
    assert qt["quant_algo"] == "W8A8_SQ_PER_CHANNEL" and qt["kv_cache_scheme"] == fp8_kv
    assert qd["quant_algo"] == "FP8" and qd["kv_cache_scheme"] == fp8_kv
    hf = json.loads((res.out / "target" / "hf_quant_config.json").read_text())["quantization"]
    assert hf["kv_cache_quant_algo"] == "FP8"
    t = tensors(res.out / "target")
    assert t["model.layers.0.self_attn.k_proj.k_scale"][0] == t["model.layers.0.self_attn.v_proj.v_scale"][0] == "F32"
    assert tensors(res.out / "draft")["model.layers.1.self_attn.q_proj.weight"][0] == "F8_E4M3"
    assert validate_llm_api_yaml(res.out / "llm_api.yaml").kv_cache_config.dtype == "fp8"


def test_eagle3_build_bundles_head_and_capture_layers(tmp_path, pair):
    target, _ = pair
    head = make_eagle3(tmp_path / "head", target, aux_ids=(0, 1), draft_vocab=200)
    res = run(tmp_path, target, head, drafter="eagle3", quant="fp8")
    assert hash_files(res.out / "draft") == hash_files(head)
    spec = validate_llm_api_yaml(res.out / "llm_api.yaml").speculative_config
    assert spec.decoding_type == "Eagle3" and spec.eagle3_layers_to_capture == [0, 1]
    assert spec.speculative_model == "./draft"


def test_unquantized_eagle3_bundle_loads_in_runtime_and_triton(tmp_path, pair):
    target, _ = pair
    head = make_eagle3(tmp_path / "head", target, aux_ids=(0, 1), draft_vocab=200)
    res = run(tmp_path, target, head, drafter="eagle3", quant="none")
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    layout = read_bundle(res.out)
    assert (layout.drafter, layout.draft_len, layout.draft) == ("eagle3", 4, res.out / "draft")
    pipe = load_pipeline(res.out / "target", res.out / "draft", drafter="eagle3", draft_len=layout.draft_len,
                         draft_len_schedule=layout.draft_len_schedule)
    gen = pipe.generate(["def f(x):"], max_new_tokens=4)[0]
    assert len(gen.token_ids) == 4


def test_ngram_build_has_no_draft(tmp_path, pair):
    target, _ = pair
    res = run(tmp_path, target, drafter="ngram", quant="fp8")
    assert not (res.out / "draft").exists()
    spec = validate_llm_api_yaml(res.out / "llm_api.yaml").speculative_config
    assert spec.decoding_type == "NGram" and spec.max_concurrency == 48 and spec.speculative_model is None
    # --max-seq-len defaults to the target's max_position_embeddings (512) when that is below 4096
    assert validate_llm_api_yaml(res.out / "llm_api.yaml").max_seq_len == 512


def test_failure_in_a_stage_leaves_no_bundle_and_rerun_reuses_cache(tmp_path, pair, monkeypatch):
    target, draft = pair
    from trtspec.builder import emit

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(emit, "write_configs", boom)
    with pytest.raises(pipeline.BuildError, match="stage 'emit': disk on fire"):
        run(tmp_path, target, draft, quant="fp8")
    assert not (tmp_path / "bundle").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    monkeypatch.undo()

    from trtspec.builder import quantize

    def no_quant(*a, **k):
        raise AssertionError("quantized again instead of reusing the cache")

    monkeypatch.setattr(quantize, "quantize_and_export", no_quant)
    res = run(tmp_path, target, draft, quant="fp8")
    assert any("reused cached checkpoint" in s for s in res.summaries)
    assert json.loads((res.out / "manifest.json").read_text())["cache"]["target"].startswith("reused")
    assert tensors(res.out / "target")["model.layers.0.mlp.down_proj.weight"][0] == "F8_E4M3"
    # a rebuild onto the existing bundle swaps it atomically and leaves nothing beside it
    (res.out / "stale.txt").write_text("from the previous bundle")
    res = run(tmp_path, target, draft, quant="fp8")
    assert not (res.out / "stale.txt").exists() and (res.out / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "cache"]


def test_dry_run_plans_without_writing(tmp_path, pair):
    target, draft = pair
    opts = BuildOptions(target=target, draft=draft, out=tmp_path / "bundle", cache_dir=tmp_path / "cache")
    res = pipeline.build(opts, dry_run=True, quiet=True, recipe_resolver=fake_resolver)
    assert res.plan["quantize"] == [{"role": "target", "quant": "fp8", "kv_cache_quant": "none",
                                     "modelopt_config": "FP8_DEFAULT_CFG", "cache": "miss"}]
    assert res.plan["recipe"]["draft_len_schedule"] == {4: 4, 16: 3, 48: 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_mtp_target_is_bundled_whole_and_quantizing_it_is_refused(tmp_path, pair):
    import shutil

    import torch
    from safetensors.torch import save_file

    from trtspec.builder.validate import BuildInputError

    target, _ = pair
    mtp = tmp_path / "mtp_target"
    shutil.copytree(target, mtp)
    cfg = json.loads((mtp / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 1
    (mtp / "config.json").write_text(json.dumps(cfg))
    save_file({"model.layers.2.eh_proj.weight": torch.zeros(128, 256)}, str(mtp / "mtp.safetensors"))
    with pytest.raises(BuildInputError, match="drops the MTP layers"):
        run(tmp_path, mtp, drafter="mtp", quant="fp8")
    res = run(tmp_path, mtp, drafter="mtp", quant="none")
    assert "model.layers.2.eh_proj.weight" in tensors(res.out / "target")
    spec = validate_llm_api_yaml(res.out / "llm_api.yaml").speculative_config
    assert spec.decoding_type == "MTP" and spec.speculative_model is None
