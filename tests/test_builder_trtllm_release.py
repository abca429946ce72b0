"""TensorRT-LLM 1.4.0rc4 as the default target: what its facts file says, and where the ``llm_api.yaml`` emitted for it
differs from the one for main-0004396 (the llm_args.py the ``engines`` tier runs) and from the PR #16888 branch.

1.4.0rc4 keeps every field trtspec writes under the same spelling and rule; it drops fields trtspec never writes. So
its YAML equals main-0004396's for every drafter and verification, and differs from the PR branch exactly where the
runtime floor does."""
from __future__ import annotations

import pytest
from test_builder_configs import FakeRecipe, _opts, dspark_facts

from trtspec.builder import emit
from trtspec.builder.draft_config import DrafterFacts, read_block_draft
from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, check_version, engine_version

RELEASE, MAIN, FLOOR = "1.4.0rc4", "main-0004396", "pr16888-011d093"
MC32 = dict(draft_len_schedule={}, vllm_schedule={}, max_concurrency=32)


def facts_for(drafter: str, mtp_layers: int = 1) -> DrafterFacts:
    if drafter == "dspark":
        return dspark_facts({"dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    if drafter == "dflash":
        block = read_block_draft({"dflash_config": {"target_layer_ids": [0, 1], "block_size": 8}}, "dflash")
        return DrafterFacts(layer_ids=[0, 1], block=block, draft_architectures=("DFlashDraftModel",),
                            draft_model_type="qwen3")
    return DrafterFacts(layer_ids=[0, 1], mtp_layers=mtp_layers)


def llm_api(drafter, version, recipe=None, mtp_layers=1, **kw) -> dict:
    cfg = emit.plan_configs(recipe or FakeRecipe(), _opts(drafter, max_batch_size=64, trtllm_version=version, **kw),
                            facts_for(drafter, mtp_layers))
    return emit.llm_api_data(cfg.llm_api)


def test_the_release_is_the_default_and_names_its_tag_and_package():
    rel = engine_version("trtllm")
    assert (DEFAULT_VERSION["trtllm"], rel.version, rel.tag, rel.package) == \
        (RELEASE, RELEASE, "v1.4.0rc4", "tensorrt-llm==1.4.0rc4")
    assert {MAIN, FLOOR} <= set(VERSIONS["trtllm"])  # the main-branch reads stay encoded
    with pytest.raises(ValueError, match=r"--trtllm-version '1\.4\.0' is not a known TensorRT-LLM version"):
        check_version("trtllm", "1.4.0")


@pytest.mark.parametrize("drafter,verify,mtp_layers", [
    ("draft_model", "greedy", 1), ("draft_model", "sample", 1), ("draft_model", "block", 1), ("eagle3", "greedy", 1),
    ("eagle3", "block", 1), ("mtp", "greedy", 1), ("mtp", "greedy", 3), ("ngram", "greedy", 1),
    ("sa", "greedy", 1), ("dflash", "greedy", 1), ("dspark", "greedy", 1)])
@pytest.mark.parametrize("recipe", ["schedule", "max_concurrency"])
def test_release_yaml_equals_main_0004396(drafter, verify, mtp_layers, recipe):
    r = FakeRecipe() if recipe == "schedule" else FakeRecipe(**MC32)
    assert llm_api(drafter, RELEASE, r, mtp_layers, verify=verify) == llm_api(drafter, MAIN, r, mtp_layers,
                                                                              verify=verify)


def test_release_yaml_differs_from_the_floor_branch_where_the_runtime_does():
    tail = FakeRecipe()  # {4: 4, 16: 3, 48: 1}: D=0 above 48 wanted
    rel, pr = llm_api("eagle3", RELEASE, tail), llm_api("eagle3", FLOOR, tail)
    assert rel["speculative_config"]["draft_len_schedule"] == {4: 4, 16: 3, 64: 1}  # no floor: D=1 written
    assert pr["speculative_config"]["draft_len_schedule"] == {4: 4, 16: 3, 48: 1}  # the floor drafts 1 itself
    assert {k: v for k, v in rel.items() if k != "speculative_config"} == \
        {k: v for k, v in pr.items() if k != "speculative_config"}
    # DSpark layer ids only under dflash_config: 1.4.0rc4 reads them there (as main), the PR branch does not
    assert "target_layer_ids" not in llm_api("dspark", RELEASE)["speculative_config"]
    assert llm_api("dspark", FLOOR)["speculative_config"]["target_layer_ids"] == [1, 4]


@pytest.mark.parametrize("drafter", ["draft_model", "eagle3", "mtp", "ngram", "sa", "dflash", "dspark"])
def test_no_field_the_release_removed_is_written(drafter):
    removed = set(engine_version("trtllm", RELEASE)["removed_fields"])
    data = llm_api(drafter, RELEASE)
    assert not removed & (set(data) | set(data["speculative_config"]))
