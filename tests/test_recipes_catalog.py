"""Catalog: GPU files, built-in model configs, HF layouts, priors and the errors bad input gets."""
import json

import pytest
import yaml

from trtspec.recipes.acceptance import load_prior, prior_names
from trtspec.recipes.arch import builtin_names, from_hf_config, load_architecture
from trtspec.recipes.errors import CatalogError, ConfigError, UnknownGPUError
from trtspec.recipes.gpus import gpu_names, load_gpu, load_gpu_file
from trtspec.recipes.paths import book_dir

REQUIRED_GPUS = {"a100", "h100", "h200", "b200", "gb200", "b300", "l40s", "rtx-pro-6000", "h20", "cpu"}


def test_every_required_gpu_is_catalogued_and_validates():
    assert REQUIRED_GPUS <= set(gpu_names())
    for name in gpu_names():
        gpu = load_gpu(name)
        if not gpu.requires_calibration:
            assert gpu.bandwidth > 0 and gpu.flops["bf16"] > 0 and gpu.memory_bytes > 0


def test_every_gpu_figure_has_a_source_or_justification():
    for path in sorted((book_dir() / "gpus").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        figures = [doc["memory_gb"], doc["hbm_bandwidth_tbs"], *doc.get("tflops", {}).values()]
        for fig in figures:
            assert str(fig.get("source", "")).strip(), (path, fig)
        for fig in [*doc.get("efficiency", {}).values(), *doc.get("overheads", {}).values()]:
            assert str(fig.get("justification", "")).strip(), (path, fig)
        assert str(doc["interconnect"].get("source", "")).strip()


def test_h200_figures_match_datasheet():
    g = load_gpu("H200")
    assert g.memory_bytes == 141e9 and g.bandwidth == 4.8e12
    assert g.flops == {"bf16": 989e12, "fp8": 1979e12}
    assert g.link_bandwidth == 450e9  # 900 GB/s bidirectional -> 450 GB/s each way


def test_gpu_file_without_source_is_rejected(tmp_path):
    doc = yaml.safe_load((book_dir() / "gpus" / "h100.yaml").read_text())
    del doc["tflops"]["fp8"]["source"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(CatalogError, match="fp8' has no source"):
        load_gpu_file(bad)


def test_gpu_file_without_kernel_floor_is_rejected(tmp_path):
    """The kernel-duration latency floor is a required, justified figure of every datasheet GPU."""
    doc = yaml.safe_load((book_dir() / "gpus" / "b200.yaml").read_text())
    assert load_gpu("b200").kernel_floor == doc["overheads"]["kernel_floor_us"]["value"] * 1e-6
    del doc["overheads"]["kernel_floor_us"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(CatalogError, match="kernel_floor_us"):
        load_gpu_file(bad)


def test_unknown_gpu_lists_known_ones():
    with pytest.raises(UnknownGPUError) as err:
        load_gpu("h300x")
    assert "h200" in str(err.value) and "b200" in str(err.value) and "unknown GPU 'h300x'" in str(err.value)


def test_no_fp4_on_hopper():
    with pytest.raises(CatalogError, match="no fp4 tensor cores"):
        load_gpu("h200").peak_flops("fp4")


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_models_parse(name):
    arch = load_architecture(name)
    assert arch.num_layers == len(arch.blocks) > 0
    assert arch.total_params() >= arch.active_params() * 0.9


@pytest.mark.parametrize("name,params_b,tol", [
    ("llama-3.1-8b", 8.03, 0.01), ("llama-3.1-70b", 70.6, 0.01), ("deepseek-r1", 671.0, 0.01),
    ("qwen3-30b-a3b", 30.5, 0.01), ("qwen3-next-80b-a3b", 80.0, 0.02), ("gpt-oss-120b", 116.8, 0.02),
    ("mixtral-8x7b", 46.7, 0.01), ("qwen3-235b-a22b", 235.0, 0.01),
])
def test_parameter_counts_match_published_sizes(name, params_b, tol):
    assert load_architecture(name).total_params() / 1e9 == pytest.approx(params_b, rel=tol)


def test_layouts_of_each_family():
    ds = load_architecture("deepseek-r1")
    assert {b.mixer for b in ds.blocks} == {"mla"} and ds.group_size == 128 and ds.mtp_layers == 1
    assert [b.ffn for b in ds.blocks[:4]] == ["dense", "dense", "dense", "moe"]
    oss = load_architecture("gpt-oss-120b")
    assert [b.mixer for b in oss.blocks[:4]] == ["sliding", "attention", "sliding", "attention"]
    assert oss.blocks[0].window == 128
    gemma = load_architecture("gemma-3-27b")
    assert [b.mixer for b in gemma.blocks[:6]] == ["sliding"] * 5 + ["attention"]
    nem = load_architecture("nemotron-h-8b")
    assert sum(b.mixer == "mamba2" for b in nem.blocks) == 24 and sum(b.mixer == "attention" for b in nem.blocks) == 4
    assert not nem.mlp_gated
    qn = load_architecture("qwen3-next-80b-a3b")
    assert [b.mixer for b in qn.blocks[:4]] == ["linear", "linear", "linear", "attention"]
    assert qn.linear.state == 32 * 128 * 128
    mix = load_architecture("mixtral-8x7b")
    assert mix.moe.num_experts == 8 and mix.moe.experts_per_token == 2 and {b.mixer for b in mix.blocks} == {"attention"}


def test_qwen35_style_nested_text_config_with_layer_types(tmp_path):
    text = dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
                vocab_size=1000, intermediate_size=0, num_experts=64, num_experts_per_tok=4, moe_intermediate_size=256,
                shared_expert_intermediate_size=256,
                layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe", "text_config": text}))
    arch = load_architecture(tmp_path)
    assert [b.mixer for b in arch.blocks] == ["linear"] * 3 + ["attention"]
    assert all(b.ffn == "moe" for b in arch.blocks) and arch.moe.shared_intermediate == 256


BASE = dict(hidden_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, vocab_size=100,
            intermediate_size=1024)


def test_missing_field_names_it():
    cfg = dict(BASE)
    del cfg["hidden_size"]
    with pytest.raises(ConfigError, match="hidden_size"):
        from_hf_config(cfg, "m")


def test_unknown_attention_type_in_layer_types():
    with pytest.raises(ConfigError, match=r"unknown attention type 'ring_attention' at layer_types\[1\]"):
        from_hf_config({**BASE, "layer_types": ["full_attention", "ring_attention"]}, "m")


def test_chunked_attention_needs_its_chunk_size():
    with pytest.raises(ConfigError, match="'attention_chunk_size' must be a positive integer"):
        from_hf_config({**BASE, "layer_types": ["full_attention", "chunked_attention"]}, "m")
    arch = from_hf_config({**BASE, "layer_types": ["full_attention", "chunked_attention"], "attention_chunk_size": 64})
    assert [(b.mixer, b.window) for b in arch.blocks] == [("attention", None), ("sliding", 64)]


def test_unknown_explicit_attention_type():
    with pytest.raises(ConfigError, match="unknown attention type 'flash'"):
        from_hf_config({**BASE, "attention_type": "flash"}, "m")


def test_unknown_pattern_char():
    with pytest.raises(ConfigError, match=r"unknown layer type 'X' at hybrid_override_pattern\[1\]"):
        from_hf_config({**BASE, "hybrid_override_pattern": "*X"}, "m")


@pytest.mark.parametrize("key", ["hidden_size", "num_attention_heads", "vocab_size", "intermediate_size"])
def test_negative_sizes_rejected(key):
    with pytest.raises(ConfigError, match=key):
        from_hf_config({**BASE, key: -4}, "m")


def test_heads_not_multiple_of_kv_heads():
    with pytest.raises(ConfigError, match="not a multiple"):
        from_hf_config({**BASE, "num_key_value_heads": 3}, "m")


def test_unknown_model_lists_builtins():
    with pytest.raises(ConfigError, match="llama-3.1-70b"):
        load_architecture("no-such-model")


def test_priors_carry_sources():
    assert prior_names()
    for name in prior_names():
        p = load_prior(name)
        assert "http" in p.source and p.drafter
