"""The shipped DeepSeek-V3-layout demo target (trtspec.zoo.deepseek_path): its layout as the engines read it,
transformers' logits, the card's checksums, MTP acceptance on held-out prompts, and the smoke training run."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors import safe_open

from runtime_fixtures import full_logits, single_thread  # noqa: F401
from trtspec.zoo import DEEPSEEK_CARD, DEEPSEEK_DIR, DEMO_DIR, deepseek_path, demo_pair
from trtspec.zoo.card import read_checksums, verify_checksums
from trtspec.zoo.train import main

#: what vLLM's DeepSeekMTP / SGLang's NextN / TensorRT-LLM's DeepseekV3MTP load from model.layers.{N}
MTP_NAMES = ("enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.norm.weight", "shared_head.head.weight",
             "embed_tokens.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
             "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight", "mlp.gate.weight",
             "mlp.gate.e_score_correction_bias", "mlp.shared_experts.down_proj.weight", "mlp.experts.0.gate_proj.weight")


def _tensors(path) -> dict:
    with safe_open(str(path / "model.safetensors"), "pt") as st:
        return {k: st.get_slice(k).get_dtype() for k in st.keys()}


def test_shipped_model_has_the_deepseek_v3_layout_the_engines_load():
    d = deepseek_path()
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    assert (cfg["scoring_func"], cfg["topk_method"], cfg["num_nextn_predict_layers"]) == ("sigmoid", "noaux_tc", 1)
    assert cfg["q_lora_rank"] and cfg["kv_lora_rank"] and cfg["n_group"] > cfg["topk_group"] >= 1
    assert 0 < cfg["first_k_dense_replace"] < cfg["num_hidden_layers"] and cfg["rope_interleave"] is True
    n = cfg["num_hidden_layers"]
    names = _tensors(d)
    assert {f"model.layers.{n}.{k}" for k in MTP_NAMES} <= set(names)
    assert not any(k.startswith(f"model.layers.{n + 1}.") for k in names)
    assert names[f"model.layers.{n}.mlp.gate.e_score_correction_bias"] == "F32"
    assert names["model.layers.1.mlp.experts.0.down_proj.weight"] == "BF16"
    assert (d / "tokenizer.json").read_bytes() == (DEMO_DIR / "target" / "tokenizer.json").read_bytes()
    assert demo_pair("mtp") == (d, None)


def test_runtime_logits_equal_transformers_on_the_shipped_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trtspec.runtime.models import load_model

    d = deepseek_path()
    ids = AutoTokenizer.from_pretrained(d).encode("def parse(path):\n    with open(path) as f:\n")
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf(input_ids=torch.tensor([ids])).logits[0]
    got = full_logits(load_model(d), ids)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_card_checksums_and_size():
    rows = read_checksums(DEEPSEEK_CARD)
    assert "deepseek/model.safetensors" in rows and "deepseek/acceptance.json" in rows
    assert verify_checksums(DEEPSEEK_CARD, DEEPSEEK_DIR) == []
    total = sum(p.stat().st_size for p in DEEPSEEK_DIR.rglob("*") if p.is_file())
    assert total <= 12 * 1024 * 1024, f"the DeepSeek-V3-layout demo is {total / 1e6:.1f} MB"


def test_mtp_accepts_at_least_half_its_first_drafts_on_held_out_prompts():
    """AL at D=1 >= 1.5 on 12 held-out function prompts (greedy; the output equals the target alone)."""
    from tokenizers import Tokenizer

    from trtspec.runtime import load_pipeline
    from trtspec.zoo import data

    d = deepseek_path()
    split = data.CorpusSplit.build()
    prompts = data.function_prompts(split, Tokenizer.from_file(str(d / "tokenizer.json")), 12, 48)
    base = load_pipeline(d, drafter="mtp", draft_len=0).generate_ids(prompts, max_new_tokens=32)
    pipe = load_pipeline(d, drafter="mtp", draft_len=1)
    got = pipe.generate_ids(prompts, max_new_tokens=32)
    assert [t for t, _ in got] == [t for t, _ in base]
    assert pipe.last_stats.mean_al >= 1.5, pipe.last_stats.mean_al


def test_shipped_acceptance_profile_is_the_mtp_drafter():
    from trtspec.zoo import demo_acceptance_path

    prof = json.loads(demo_acceptance_path("mtp").read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == "mtp"
    assert prof["rates"][0] >= 0.5 and prof["mean_al"] > 1.5


def test_smoke_training_run_writes_a_loadable_mtp_target(tmp_path):
    from transformers import AutoModelForCausalLM

    from trtspec.runtime import load_pipeline

    out = tmp_path / "ds"
    card = tmp_path / "ds_MODEL_CARD.md"
    assert main(["--arch", "deepseek-v3", "--smoke", "--out", str(out)]) == 0
    assert not (tmp_path / "ds.partial").exists() and not (out / "training.json").exists()
    m = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert m.config.architectures == ["DeepseekV3ForCausalLM"] and m.config.num_nextn_predict_layers == 1
    meas = json.loads((out / "measurements.json").read_text())
    assert meas["config"]["steps"] == 12 and math.isfinite(meas["heldout_loss"]["mtp"])
    assert all(v == 1.0 for v in meas["acceptance"]["greedy_match"].values())
    assert json.loads((out / "acceptance.json").read_text())["drafter"] == "mtp"
    assert verify_checksums(card, out) == []
    assert load_pipeline(out, drafter="mtp", draft_len=2).drafter.name == "mtp"


def test_deepseek_arch_refuses_llama_only_options(tmp_path):
    with pytest.raises(SystemExit):
        main(["--arch", "deepseek-v3", "--smoke", "--out", str(tmp_path / "x"), "--no-heads"])
    with pytest.raises(SystemExit):
        main(["--arch", "deepseek-v3", "--smoke"])   # must not overwrite the shipped model
