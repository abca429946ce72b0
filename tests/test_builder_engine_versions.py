"""Engine versions as data: the facts files, the draft length each TensorRT-LLM version runs per batch size, and
where the emitted configs differ between versions (zero-draft tiers, max_concurrency, DSpark fields, vLLM keys)."""
from __future__ import annotations

import re

import pytest
import yaml
from pydantic import ValidationError
from test_builder_configs import FakeRecipe, _opts, dspark_facts

from trtspec.builder import emit
from trtspec.builder.draft_config import DrafterFacts
from trtspec.builder.engine_facts import (DEFAULT_VERSION, ENGINES_DIR, VERSIONS, EngineFactsError, check_version,
                                          engine_version, load_engine_file)
from trtspec.builder.trtllm_config import validate_llm_api
from trtspec.builder.trtllm_schedule import plan_schedule, runtime_draft_len, zero_draft_batches
from trtspec.builder.vllm_config import VllmSpeculativeConfig, dotted_keys

OLD, FLOOR = "main-0004396", "pr16888-011d093"
ONE_ENGINE = ("draft_model", "eagle3", "mtp", "sa", "dflash")  # one-engine drafters with dynamic draft length


def test_facts_files_are_the_encoded_versions_and_every_fact_has_a_source():
    files = sorted(p.name for p in ENGINES_DIR.glob("*.yaml"))
    assert files == sorted(f"{e}-{v}.yaml" for e, vs in VERSIONS.items() for v in vs)
    for engine, versions in VERSIONS.items():
        assert DEFAULT_VERSION[engine] in versions
        for v in versions:
            ev = load_engine_file(ENGINES_DIR / f"{engine}-{v}.yaml")
            assert (ev.engine, ev.version) == (engine, v)
            assert re.fullmatch(r"[0-9a-f]{40}", ev.commit or "") or (ev.tag == f"v{v}" and ev.package)
            for fact in ev.facts.values():  # a path@commit, path@release-tag or a pull request / issue number
                assert re.search(r"@[0-9a-f]{7}|@v\d+\.\d+\.\d+|#\d+", fact.source), (engine, v, fact.name, fact.source)


def test_unknown_version_and_malformed_file_are_refused(tmp_path):
    with pytest.raises(EngineFactsError, match=r"--trtllm-version 'v9' is not a known TensorRT-LLM version; known: "
                                               r"pr16888-011d093, "
                                               r"main-0004396"):
        check_version("trtllm", "v9")
    bad = tmp_path / "x.yaml"
    bad.write_text(yaml.safe_dump({"engine": "vllm", "version": "v", "repo": "r", "commit": "0" * 40, "summary": "s",
                                   "facts": {"keys": {"value": {}}}}))
    with pytest.raises(EngineFactsError, match="fact 'keys' must be a mapping with 'value' and a non-empty 'source'"):
        load_engine_file(bad)


def test_decoding_types_are_the_facts():
    for v in VERSIONS["trtllm"]:
        assert engine_version("trtllm", v)["decoding_types"] == emit.DECODING_TYPES


SCHEDULE = {4: 4, 8: 2, 32: 1}


@pytest.mark.parametrize("schedule,batch,expected", [
    (SCHEDULE, 1, 4), (SCHEDULE, 8, 2), (SCHEDULE, 32, 1), (SCHEDULE, 33, 1), (SCHEDULE, 4096, 1),
    ({4: 4, 8: 0}, 8, 1), (None, 4096, 4)])
def test_runtime_floor_matches_the_pr16888_tests(schedule, batch, expected):
    """The cases of tests/unittest/_torch/speculative/hw_agnostic/test_min_runtime_draft_len.py@011d0933 (floor 1
    for one-engine Eagle3; a floor of 0 keeps the schedule as written, as main-0004396 does)."""
    spec = {"decoding_type": "Eagle3", "max_draft_len": 4, "draft_len_schedule": schedule}
    assert runtime_draft_len(spec, batch, engine_version("trtllm", FLOOR)) == expected
    unfloored = 0 if schedule and (batch > max(schedule) or schedule.get(batch) == 0) else expected
    assert runtime_draft_len(spec, batch, engine_version("trtllm", OLD)) == unfloored
    ngram = {"decoding_type": "NGram", "max_draft_len": 4, "max_concurrency": 32}
    assert runtime_draft_len(ngram, 33, engine_version("trtllm", FLOOR)) == 0  # two-model: no floor, cut-off


RECIPES = {  # planner wishes: schedule (TensorRT-LLM semantics, 0 above the largest key) / max_concurrency
    "tail": dict(draft_len_schedule={4: 4, 16: 3, 48: 1}, max_draft_len=4),
    "explicit_zero": dict(draft_len_schedule={4: 4, 16: 2, 40: 0}, max_draft_len=4),
    "max_concurrency": dict(draft_len_schedule={}, max_draft_len=3, max_concurrency=24, vllm_schedule={}),
    "one_tier": dict(draft_len_schedule={8: 5}, max_draft_len=5, vllm_schedule={8: 5}),
    "full": dict(draft_len_schedule={4: 4, 100: 2}, max_draft_len=4, vllm_schedule={4: 4, 100: 2}),
}


@pytest.mark.parametrize("version", [OLD, FLOOR])
@pytest.mark.parametrize("drafter", ONE_ENGINE)
@pytest.mark.parametrize("shape", sorted(RECIPES))
def test_one_engine_drafters_never_run_a_zero_draft(version, drafter, shape):
    """Batch by batch over 1..max_batch_size: never 0 for a one-engine drafter; where the planner wanted D>0 the
    runtime runs exactly that D; where it wanted 0 it runs 1 (D=1 emitted on main-0004396, the floor on the PR)."""
    max_bs = 100
    recipe = FakeRecipe(**RECIPES[shape])
    tv = engine_version("trtllm", version)
    cfg = emit.plan_configs(recipe, _opts(drafter, max_batch_size=max_bs, trtllm_version=version),
                            DrafterFacts(layer_ids=[0, 1], mtp_layers=1))
    spec = emit.llm_api_data(cfg.llm_api)["speculative_config"]
    validate_llm_api(emit.llm_api_data(cfg.llm_api), version)
    wish = recipe.draft_len_schedule or {recipe.max_concurrency: recipe.max_draft_len}
    for b in range(1, max_bs + 1):
        planned = next((wish[k] for k in sorted(wish) if b <= k), 0)
        assert runtime_draft_len(spec, b, tv) == (planned if planned else 1), (b, spec)
    assert zero_draft_batches(spec, tv, max_bs) == []
    if version == FLOOR:  # the version floors itself: the plan is emitted as planned
        assert spec.get("draft_len_schedule") == (recipe.draft_len_schedule or None)
        assert spec.get("max_concurrency") == recipe.max_concurrency


def test_emitted_yaml_differs_between_versions_where_the_runtime_does():
    def spec(drafter, version, recipe, facts=None):
        cfg = emit.plan_configs(recipe, _opts(drafter, max_batch_size=64, trtllm_version=version),
                                facts or DrafterFacts(layer_ids=[0, 1]))
        return emit.llm_api_data(cfg.llm_api)["speculative_config"]

    tail = FakeRecipe()  # {4: 4, 16: 3, 48: 1}
    assert spec("eagle3", OLD, tail)["draft_len_schedule"] == {4: 4, 16: 3, 64: 1}
    assert spec("eagle3", FLOOR, tail)["draft_len_schedule"] == {4: 4, 16: 3, 48: 1}
    mc = FakeRecipe(draft_len_schedule={}, vllm_schedule={}, max_concurrency=32)
    assert (spec("dflash", OLD, mc).get("max_concurrency"), spec("dflash", OLD, mc)["draft_len_schedule"]) == \
        (None, {32: 4, 64: 1})
    assert (spec("dflash", FLOOR, mc)["max_concurrency"], spec("dflash", FLOOR, mc).get("draft_len_schedule")) == \
        (32, None)
    assert spec("ngram", OLD, tail) == spec("ngram", FLOOR, tail)  # two-model n-gram: same cut-off on both
    # DSpark ids only under dflash_config: main-0004396 reads them there, the PR branch does not
    facts = dspark_facts({"dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    assert spec("dspark", OLD, tail, facts) == {"decoding_type": "DSpark", "max_draft_len": 4,
                                                "speculative_model": "./draft"}
    assert spec("dspark", FLOOR, tail, facts) == {"decoding_type": "DSpark", "max_draft_len": 4,
                                                  "speculative_model": "./draft", "target_layer_ids": [1, 4]}
    # top-level dspark_* keys: both versions read them, nothing is written
    facts = dspark_facts({"dspark_target_layer_ids": [1, 4], "dspark_block_size": 4, "dspark_markov_rank": 8})
    assert spec("dspark", OLD, tail, facts) == spec("dspark", FLOOR, tail, facts)
    assert "markov_rank" not in spec("dspark", FLOOR, tail, facts)


def test_dspark_drafts_its_block_and_block_size_is_never_written_to_hide_a_mismatch():
    """A draft trained with dspark_block_size 8 under a recipe that planned D=5: max_draft_len 8, no
    block_size in the YAML, no schedule (DSpark has no per-batch draft length), and the note says why."""
    recipe = FakeRecipe(draft_len_schedule={4: 5, 64: 1}, max_draft_len=5)
    facts = dspark_facts({"dspark_block_size": 8, "dspark_target_layer_ids": [0, 1]})
    for version in (OLD, FLOOR):
        cfg = emit.plan_configs(recipe, _opts("dspark", max_batch_size=64, trtllm_version=version), facts)
        spec = emit.llm_api_data(cfg.llm_api)["speculative_config"]
        assert spec == {"decoding_type": "DSpark", "max_draft_len": 8, "speculative_model": "./draft"}
        assert any("the recipe planned D=5; a DSpark draft drafts its trained block, so D=8" in n for n in cfg.notes)
        assert cfg.vllm.speculative_config.num_speculative_tokens == 8
    with pytest.raises(ValidationError, match=r"DSpark block_size \(5\) must equal max_draft_len \(8\)"):
        validate_llm_api({"max_batch_size": 8, "max_seq_len": 64, "speculative_config": {
            "decoding_type": "DSpark", "max_draft_len": 8, "speculative_model": "./draft", "block_size": 5}})
    with pytest.raises(ValueError, match="the draft's block size is unknown"):
        emit.plan_configs(recipe, _opts("dspark"), DrafterFacts(layer_ids=[0, 1]))


def test_dspark_recipe_rows_that_lose_are_reported():
    rows = [{"batch": 1, "draft_len": 4, "speedup": 1.8}, {"batch": 64, "draft_len": 4, "speedup": 0.93}]
    cfg = emit.plan_configs(FakeRecipe(rows=rows), _opts("dspark", max_batch_size=64), dspark_facts())
    assert any("does not pay at batch 64 (0.93x)" in n and "cannot switch DSpark off per batch" in n
               for n in cfg.notes)


@pytest.mark.parametrize("version", [OLD, FLOOR])
def test_vanilla_mtp_keeps_a_static_draft_length(version):
    """More than one MTP layer: a shorter runtime draft leaves MTP modules stale (interface.py@011d0933), so no
    schedule on either version, and D is capped at the layers."""
    recipe = FakeRecipe(draft_len_schedule={4: 4, 64: 2}, max_draft_len=4)
    cfg = emit.plan_configs(recipe, _opts("mtp", max_batch_size=64, trtllm_version=version),
                            DrafterFacts(mtp_layers=3))
    spec = emit.llm_api_data(cfg.llm_api)["speculative_config"]
    assert spec == {"decoding_type": "MTP", "max_draft_len": 3}
    assert any("vanilla MTP runs at most its 3 MTP layers" in n for n in cfg.notes)
    assert any("vanilla MTP (more than one MTP layer) keeps a static draft length" in n for n in cfg.notes)


def test_mirror_validates_per_version():
    base = {"max_batch_size": 8, "max_seq_len": 64}
    for version in (OLD, FLOOR):
        with pytest.raises(ValidationError, match=f"DSpark does not support draft_len_schedule in TensorRT-LLM "
                                                  f"{version}"):
            validate_llm_api({**base, "speculative_config": {"decoding_type": "DSpark", "max_draft_len": 4,
                                                             "speculative_model": "./d", "draft_len_schedule": {4: 4}}},
                             version)
        with pytest.raises(ValidationError, match="Extra inputs"):  # a property of the PR branch, not a field
            validate_llm_api({**base, "speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4,
                                                             "speculative_model": "./d", "min_runtime_draft_len": 1}},
                             version)


def test_plan_notes_go_into_the_recipe_and_the_readme(tmp_path):
    recipe = FakeRecipe()
    recipe.provenance = {}
    opts = _opts("eagle3", max_batch_size=64)
    written = emit.write_configs(tmp_path, recipe, opts, facts=DrafterFacts(layer_ids=[0, 1]))
    assert any("D=1 (the smallest safe length) replaces D=0 (batch > 48)" in n
               for n in recipe.provenance["engine_notes"])
    text = emit.readme(opts, written, recipe, [])
    assert "## TensorRT-LLM (TensorRT-LLM 1.4.0rc4, llm_args.py at v1.4.0rc4)" in text
    assert "- draft length per batch size: batch 1-4: 4, batch 5-16: 3, batch 17-64: 1" in text
    assert "## vLLM (vLLM 0.33.0, v0.33.0)" in text
    assert "batch 17-48: 1, batch 49-64: 0" in text
    assert "## Changes to the plan" in text


def test_plan_schedule_merges_and_drops_a_no_op_max_concurrency():
    tv = engine_version("trtllm", OLD)
    p = plan_schedule(decoding_type="Eagle3", max_draft_len=2, schedule={2: 2, 8: 1, 16: 0}, max_concurrency=None,
                      max_batch_size=32, facts=tv)
    assert p.draft_len_schedule == {2: 2, 32: 1}  # 0 -> 1 merges with the D=1 tier, extended to max_batch_size
    p = plan_schedule(decoding_type="Eagle3", max_draft_len=4, schedule=None, max_concurrency=64,
                      max_batch_size=64, facts=tv)
    assert (p.draft_len_schedule, p.max_concurrency) == (None, None)
    assert "max_concurrency 64 >= max_batch_size 64 changes nothing" in p.notes[0]


# ---- vLLM and SGLang: every key cited, per-version fields ----

@pytest.mark.parametrize("version", VERSIONS["vllm"])
@pytest.mark.parametrize("drafter", ["draft_model", "eagle3", "mtp", "ngram", "sa", "dflash", "dspark"])
@pytest.mark.parametrize("verify", ["sample", "block"])
def test_every_vllm_key_is_cited_for_its_version(tmp_path, version, drafter, verify):
    vv = engine_version("vllm", version)
    facts = dspark_facts() if drafter == "dspark" else DrafterFacts(layer_ids=[0, 1], mtp_layers=1)
    opts = _opts(drafter, max_batch_size=64, vllm_version=version, verify=verify)
    written = emit.write_configs(tmp_path, FakeRecipe(), opts, facts=facts)
    if drafter not in vv["methods"]:
        assert written["vllm"] is None and not (tmp_path / "vllm.yaml").exists()
        assert any(n.startswith(f"{vv.label} cannot serve --drafter {drafter}: it has no method for it")
                   and n.endswith("vllm.yaml not written") for n in written["notes"])
        return
    data = yaml.safe_load((tmp_path / "vllm.yaml").read_text())
    assert set(dotted_keys(data)) <= set(vv["keys"]), set(dotted_keys(data)) - set(vv["keys"])
    sc = data["speculative_config"]
    method = vv["methods"][drafter]
    dropped_on_v1 = method in vv.get("v1_runner_methods", []) and method not in vv.get("per_batch_v1_methods", [])
    per_batch = bool(vv["per_batch_field"]) and drafter != "dspark" and not dropped_on_v1
    assert ("num_speculative_tokens_per_batch_size" in sc) == per_batch
    no_probs = method in vv.get("methods_without_draft_probs", [])
    block = verify == "block" and "block" in vv["rejection_sample_methods"] and not no_probs
    assert sc.get("rejection_sample_method") == ("block" if block else None)
    if verify == "block" and no_probs and "block" in vv["rejection_sample_methods"]:
        assert any("proposes tokens without probabilities" in n for n in written["notes"])


def test_vllm_mirror_refuses_fields_the_version_lacks():
    old = {"vllm": engine_version("vllm", "main-f19b16d")}
    with pytest.raises(ValidationError, match="num_speculative_tokens_per_batch_size does not exist in vLLM "
                                              "main-f19b16d"):
        VllmSpeculativeConfig.model_validate({"method": "eagle3", "model": "./d", "num_speculative_tokens": 4,
                                              "num_speculative_tokens_per_batch_size": [(1, 4, 4)]}, context=old)
    with pytest.raises(ValidationError, match="rejection_sample_method 'block' does not exist in vLLM main-f19b16d"):
        VllmSpeculativeConfig.model_validate({"method": "eagle3", "model": "./d", "num_speculative_tokens": 4,
                                              "rejection_sample_method": "block"}, context=old)
    with pytest.raises(ValidationError, match="method 'dflash' does not exist in vLLM main-f19b16d"):
        VllmSpeculativeConfig.model_validate({"method": "dflash", "model": "./d", "num_speculative_tokens": 4},
                                             context=old)


@pytest.mark.parametrize("drafter", ["draft_model", "eagle3", "mtp", "ngram"])
def test_every_sglang_flag_is_cited(drafter):
    sv = engine_version("sglang")
    args = emit.plan_configs(FakeRecipe(), _opts(drafter)).sglang
    flags = [w[2:].replace("-", "_") for w in args.to_args() if w.startswith("--")]
    assert set(flags) <= set(sv["keys"]), set(flags) - set(sv["keys"])
    assert args.speculative_algorithm == sv["algorithms"][drafter]


def test_the_saved_recipe_says_d1_replaced_d0(tmp_path):
    from trtspec.recipes.recipe import Recipe

    rows = [{"batch": 1, "draft_len": 3}, {"batch": 8, "draft_len": 2}, {"batch": 64, "draft_len": 0}]
    recipe = Recipe.from_rows(rows=rows, max_batch_size=64, name="r", model="m", gpu="h200", tp=1, quant="fp8",
                              drafter="eagle3", context=4096, acceptance={}, signature={}, provenance={})
    assert recipe.draft_len_schedule == {1: 3, 8: 2}
    emit.write_configs(tmp_path, recipe, _opts("eagle3", max_batch_size=64), facts=DrafterFacts(layer_ids=[0, 1]))
    recipe.save(tmp_path / "recipe.yaml")
    saved = yaml.safe_load((tmp_path / "recipe.yaml").read_text())
    assert any("D=1 (the smallest safe length) replaces D=0 (batch > 8)" in n
               for n in saved["provenance"]["engine_notes"])
    spec = yaml.safe_load((tmp_path / "llm_api.yaml").read_text())["speculative_config"]
    assert spec["draft_len_schedule"] == {1: 3, 8: 2, 64: 1}
