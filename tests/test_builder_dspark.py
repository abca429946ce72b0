"""DSpark drafts through ``trtspec build``: target_layer_ids read where TensorRT-LLM reads them, a contradictory
checkpoint refused at validate (before any quantization), D = the checkpoint's block size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from runtime_fixtures import make_model
from safetensors.torch import save_file
from test_builder_configs import FakeRecipe

from trtspec.builder import pipeline, quantize
from trtspec.builder.options import BuildOptions
from trtspec.builder.pipeline import BuildError, default_resolver
from trtspec.builder.trtllm_config import validate_llm_api_yaml
from trtspec.builder.validate import BuildInputError


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """A 6-layer target (layer ids 1 and 4 exist) and a draft_model pair for the config-contradiction case."""
    root = tmp_path_factory.mktemp("dspark")
    return {"target": make_model(root / "target", hidden=128, layers=6, seed=0),
            "draft": make_model(root / "draft", hidden=128, layers=6, seed=1)}


@pytest.fixture(autouse=True)
def no_quantization(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("quantization started despite a bad input")

    monkeypatch.setattr(quantize, "quantize_and_export", fail)


def dspark_draft(root: Path, config: dict) -> Path:
    """A DSpark draft directory whose config.json is ``config`` with a model_type (plus one weight tensor)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "qwen3", **config}))
    save_file({"main_proj.weight": torch.zeros(128, 256)}, str(root / "model.safetensors"))
    return root


def build(tmp_path, target, draft, calls=None, recipe=None, **kw):
    def resolver(spec, **k):
        if calls is not None:
            calls.append(k)
        return recipe or FakeRecipe()

    opts = BuildOptions(target=target, draft=draft, drafter=kw.pop("drafter", "dspark"), out=tmp_path / "out",
                        cache_dir=tmp_path / "cache", **kw)
    return pipeline.build(opts, quiet=True, recipe_resolver=resolver)


@pytest.mark.parametrize("version,reads", [("main-0004396", "dflash_config.target_layer_ids"),
                                           ("pr16888-011d093", "dspark_target_layer_ids")])
def test_contradictory_target_layer_ids_are_refused_naming_both_fields(tmp_path, deep, version, reads):
    draft = dspark_draft(tmp_path / "d", {"dflash_config": {"target_layer_ids": [2, 5]},
                                          "dspark_target_layer_ids": [1, 4]})
    with pytest.raises(BuildInputError, match=r"--draft .*config.json states target_layer_ids twice with different "
                                              r"values: dflash_config.target_layer_ids = \[2, 5\] but "
                                              r"dspark_target_layer_ids = \[1, 4\] \(TensorRT-LLM "
                                              + version + " reads " + reads + " first\\)"):
        build(tmp_path, deep["target"], draft, quant="fp8", trtllm_version=version)
    assert not (tmp_path / "out").exists()


def test_ids_only_under_dflash_config_are_read_as_trtllm_reads_them(tmp_path, deep):
    draft = dspark_draft(tmp_path / "d", {"dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    calls: list = []
    build(tmp_path, deep["target"], draft, calls, quant="none")
    assert calls[0]["draft_len"] == 4  # the recipe is planned at the block size only
    out = tmp_path / "out"
    cfg = validate_llm_api_yaml(out / "llm_api.yaml")
    spec = yaml.safe_load((out / "llm_api.yaml").read_text())["speculative_config"]
    assert spec == {"decoding_type": "DSpark", "max_draft_len": 4, "speculative_model": "./draft"}
    assert cfg.speculative_config.max_draft_len == 4
    readme = (out / "README.md").read_text()
    assert ("`target_layer_ids` = [1, 4] is not written: this version reads it from draft/config.json "
            "(`dflash_config.target_layer_ids`)") in readme
    # the PR #16888 branch reads only dspark_config / dspark_* keys: the ids must be written there
    build(tmp_path, deep["target"], draft, quant="none", trtllm_version="pr16888-011d093")
    spec = yaml.safe_load((out / "llm_api.yaml").read_text())["speculative_config"]
    assert spec["target_layer_ids"] == [1, 4] and "block_size" not in spec
    validate_llm_api_yaml(out / "llm_api.yaml", "pr16888-011d093")


def test_d_is_the_checkpoint_block_size(tmp_path, deep):
    draft = dspark_draft(tmp_path / "d", {"dspark_block_size": 8, "dspark_target_layer_ids": [1, 4]})
    calls: list = []
    recipe = FakeRecipe(draft_len_schedule={4: 5, 256: 1}, max_draft_len=5, vllm_schedule={4: 5, 256: 1})
    build(tmp_path, deep["target"], draft, calls, recipe=recipe, quant="none")
    assert calls[0]["draft_len"] == 8
    spec = yaml.safe_load((tmp_path / "out" / "llm_api.yaml").read_text())["speculative_config"]
    assert spec == {"decoding_type": "DSpark", "max_draft_len": 8, "speculative_model": "./draft"}
    vllm = yaml.safe_load((tmp_path / "out" / "vllm.yaml").read_text())["speculative_config"]
    assert vllm == {"method": "dspark", "num_speculative_tokens": 8, "model": "./draft"}
    assert "the recipe planned D=5; a DSpark draft drafts its trained block, so D=8" in \
        (tmp_path / "out" / "README.md").read_text()


def test_dspark_without_block_size_or_layers_is_refused(tmp_path, deep):
    draft = dspark_draft(tmp_path / "d", {"dspark_target_layer_ids": [1, 4]})
    with pytest.raises(BuildInputError, match=r"dspark draft config states no block size \(dspark_config.block_size "
                                              r"/ dflash_config.block_size / dspark_block_size / block_size\)"):
        build(tmp_path, deep["target"], draft, quant="fp8")
    draft = dspark_draft(tmp_path / "e", {"dspark_block_size": 4})
    with pytest.raises(BuildInputError, match="dspark draft config has no target_layer_ids"):
        build(tmp_path, deep["target"], draft, quant="fp8")


def test_a_config_contradiction_stops_the_build_before_quantization(tmp_path, deep):
    """The serving configs are planned and validated in the recipe stage: a recipe TensorRT-LLM would refuse
    (smallest schedule key != max_draft_len) fails there, and the quantizer (which raises here) never runs."""
    bad = FakeRecipe(draft_len_schedule={2: 3, 8: 1}, max_draft_len=4)
    with pytest.raises(BuildError, match=r"(?s)stage 'recipe'.*draft_len_schedule\[2\] must equal max_draft_len") as e:
        build(tmp_path, deep["target"], deep["draft"], recipe=bad, drafter="draft_model", quant="fp8")
    assert e.value.stage == "recipe" and not (tmp_path / "out").exists()


def test_default_resolver_plans_dspark_at_its_block_only(deep):
    recipe = default_resolver("auto", model=str(deep["target"]), gpu="h200", tp=1, quant="none", drafter="dspark",
                              acceptance="rates=0.8,0.7,0.6,0.5,0.4,0.3", max_batch_size=64, context=512,
                              calibration=None, draft=None, draft_quant="none", draft_len=4)
    assert recipe.max_draft_len == 4 and {r["draft_len"] for r in recipe.rows} == {4}
    assert all("fixed" in r["binding_rule"] for r in recipe.rows)
