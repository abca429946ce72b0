"""Released engine versions as targets (vLLM 0.33.0, SGLang 0.5.23): what the emitters write for each drafter, the
per-batch draft length each engine runs (its resolution rule, batch by batch), the engines' adaptive modes, expert
parallelism, and the inputs refused before any quantization (unknown version, draft without model_type, a DFlash
draft length above its block). The engines' own code checks the same configs in ``test_engines_tier.py``."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_builder_configs import FakeRecipe, _opts, dspark_facts

from trtspec.builder import emit, quantize
from trtspec.builder.draft_config import DrafterFacts, read_block_draft
from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, engine_version
from trtspec.builder.engine_schedules import (sglang_adaptive_slot, sglang_draft_len, sglang_per_batch,
                                              vllm_draft_len, vllm_per_batch, vllm_ranges_kept)
from trtspec.builder.options import BuildOptions
from trtspec.builder.sglang_config import SglangArgs, validate_sglang
from trtspec.builder.validate import BuildInputError, validate
from trtspec.builder.vllm_config import validate_vllm
from trtspec.parallel import Parallelism

V033, S0523 = "0.33.0", "0.5.23"
SCHED = {4: 4, 16: 3, 48: 1}  # FakeRecipe's: batch 1-4 -> 4, 5-16 -> 3, 17-48 -> 1, above: 0


def dflash_facts(block=8) -> DrafterFacts:
    b = read_block_draft({"dflash_config": {"target_layer_ids": [0, 1], "block_size": block}}, "dflash")
    return DrafterFacts(layer_ids=[0, 1], block=b, draft_architectures=("DFlashDraftModel",),
                        draft_model_type="qwen3")


def plan(drafter, facts=None, recipe=None, **kw):
    facts = facts or (dspark_facts() if drafter == "dspark" else dflash_facts() if drafter == "dflash"
                      else DrafterFacts(layer_ids=[0, 1], mtp_layers=1))
    return emit.plan_configs(recipe or FakeRecipe(), _opts(drafter, max_batch_size=64, **kw), facts)


def vllm_data(cfg) -> dict:
    return cfg.vllm.model_dump(exclude_none=True, mode="json")


def wish(b: int) -> int:
    return next((SCHED[k] for k in sorted(SCHED) if b <= k), 0)


def test_releases_are_the_defaults_and_known_versions():
    assert DEFAULT_VERSION["vllm"] == V033 and DEFAULT_VERSION["sglang"] == S0523
    assert engine_version("vllm", V033).package == "vllm==0.33.0"
    assert engine_version("sglang", S0523).short_commit == "v0.5.23"
    assert {"main-002e77c", "main-f19b16d"} <= set(VERSIONS["vllm"])  # main-branch facts kept


@pytest.mark.parametrize("option,field", [("--vllm-version", "vllm_version"), ("--sglang-version", "sglang_version"),
                                          ("--trtllm-version", "trtllm_version")])
def test_unknown_version_is_refused_naming_the_option_and_known_versions(tmp_path, option, field, monkeypatch):
    with pytest.raises(ValueError, match=re.escape(f"{option} '0.1' is not a known")):
        _opts("draft_model", **{field: "0.1"})
    from trtspec.cli.build import build

    monkeypatch.setattr(quantize, "quantize_and_export", lambda *a, **k: pytest.fail("quantization started"))
    r = CliRunner().invoke(build, [option, "0.1", "--out", str(tmp_path / "b")])
    assert r.exit_code == 2 and f"{option} '0.1' is not a known" in r.output
    engine = field.split("_")[0]
    assert ", ".join(VERSIONS[engine]) in r.output.replace("\n", " ").replace("  ", " ") or \
        all(v in r.output for v in VERSIONS[engine])
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("drafter", ["draft_model", "eagle3", "mtp", "ngram", "dflash"])
def test_vllm_runs_the_planned_draft_length_at_every_batch(drafter):
    """vLLM 0.33.0 runs these on Model Runner V2 and keeps the ranges: batch by batch the recipe's draft length."""
    cfg = plan(drafter)
    data, vv = vllm_data(cfg), engine_version("vllm", V033)
    assert vllm_ranges_kept(data, vv)
    assert vllm_per_batch(data, vv) == [wish(b) for b in range(1, 65)]


def test_vllm_suffix_runs_static_k_and_the_bundle_names_its_package():
    cfg = plan("sa")
    data, vv = vllm_data(cfg), engine_version("vllm", V033)
    assert "num_speculative_tokens_per_batch_size" not in data["speculative_config"]  # V1 would drop it
    assert vllm_per_batch(data, vv) == [4] * 64
    assert any("arctic-inference==0.1.1" in n and "pip install" in n for n in cfg.notes)
    assert any("Model Runner V1, which drops" in n for n in cfg.notes)
    with pytest.raises(ValueError, match="drops num_speculative_tokens_per_batch_size"):
        validate_vllm({**data, "speculative_config": {**data["speculative_config"],
                                                      "num_speculative_tokens_per_batch_size": [[1, 64, 4]]}}, V033)


def test_vllm_resolution_rule_gaps_tail_and_clamp():
    """The rule as vLLM's build_dynamic_sd_schedule_lookup states it: gaps and the tail keep the last K, K is
    clamped to num_speculative_tokens; dropped with data parallelism."""
    vv = engine_version("vllm", V033)
    data = {"max_num_seqs": 12, "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3,
                                                       "num_speculative_tokens_per_batch_size": [[1, 2, 5], [5, 6, 1]]}}
    assert vllm_per_batch(data, vv) == [3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1]
    assert vllm_draft_len({**data, "data_parallel_size": 2}, 6, vv) == 3


def test_sglang_ngram_keeps_the_chain_and_old_version_lacks_the_flag():
    cfg = plan("ngram")
    assert cfg.sglang.speculative_ngram_max_bfs_breadth == 1 == cfg.sglang.speculative_eagle_topk
    assert "--speculative-ngram-max-bfs-breadth 1\n" in cfg.sglang.to_text()
    with pytest.raises(ValueError, match="sets NGRAM's top-k to --speculative-ngram-max-bfs-breadth"):
        validate_sglang({**cfg.sglang.model_dump(exclude_none=True), "speculative_ngram_max_bfs_breadth": None}, S0523)
    old = plan("ngram", sglang_version="main-001067f")
    assert old.sglang.speculative_ngram_max_bfs_breadth is None


@pytest.mark.parametrize("drafter,algo,flags", [
    ("eagle3", "EAGLE3", ["--speculative-use-rejection-sampling", "--speculative-use-block-verification"]),
    ("dflash", "DFLASH", ["--speculative-use-block-verification"]),
    ("dspark", "DSPARK", ["--speculative-use-block-verification"]),
    ("draft_model", "STANDALONE", []), ("ngram", "NGRAM", [])])
def test_sglang_block_verification_where_the_algorithm_has_it(drafter, algo, flags):
    cfg = plan(drafter, verify="block")
    words = cfg.sglang.to_args()
    assert cfg.sglang.speculative_algorithm == algo
    assert [w for w in words if w.startswith("--speculative-use-")] == flags
    if not flags:
        assert any(f"block verification has it for EAGLE3, NEXTN, DFLASH, DSPARK only: sglang.args verifies {algo}"
                   in n.replace("EAGLE, ", "") for n in cfg.notes)
    assert SglangArgs.from_text(cfg.sglang.to_text(), S0523) == cfg.sglang  # bare flags read back


def test_sglang_block_drafters_verify_one_block():
    dfl, dsp = plan("dflash").sglang, plan("dspark").sglang
    assert (dfl.speculative_num_steps, dfl.speculative_eagle_topk, dfl.speculative_num_draft_tokens) == (1, 1, 5)
    assert (dsp.speculative_dspark_block_size, dsp.speculative_num_draft_tokens) == (4, 5)
    assert sglang_per_batch(dsp, 8) == [4] * 8 and sglang_per_batch(dfl, 8) == [4] * 8


def test_sa_bundle_has_no_sglang_args_and_the_readme_says_why(tmp_path):
    cfg = plan("sa")
    assert cfg.sglang is None
    lines = cfg.cannot_serve()
    assert lines == ["SGLang 0.5.23 cannot serve --drafter sa: it has no speculative algorithm for it (no "
                     "suffix-automaton (SA) algorithm in this release); sglang.args not written"]
    text = emit.readme(_opts("sa"), cfg.written(), FakeRecipe(), [])
    assert "## Engines that cannot serve this bundle\n\n- SGLang 0.5.23 cannot serve --drafter sa" in text


def test_block_drafts_an_engine_does_not_register_get_no_config():
    """A DSpark draft of another architecture: vLLM 0.33.0 would take it for a DeepSeek-V4 DSpark."""
    facts = DrafterFacts(layer_ids=[0, 1], block=dspark_facts().block, draft_architectures=("LlamaDSparkDraft",),
                         draft_model_type="llama", target_model_type="llama")
    cfg = plan("dspark", facts=facts)
    assert cfg.vllm is None and cfg.sglang is None
    assert any(n.startswith("vLLM 0.33.0 cannot serve --drafter dspark with this draft") for n in cfg.cannot_serve())
    deepseek = DrafterFacts(**{**facts.__dict__, "target_model_type": "deepseek_v4"})
    assert plan("dspark", facts=deepseek).vllm is not None


def test_adaptive_modes_where_the_versions_have_them():
    dsp = plan("dspark", speculation="adaptive")
    assert dsp.vllm.speculative_config.enable_adaptive_verification is True
    assert plan("dspark").vllm.speculative_config.enable_adaptive_verification is None
    eag = plan("eagle3", speculation="adaptive")
    assert eag.vllm.speculative_config.enable_adaptive_verification is None
    assert any("schedule: static on vLLM 0.33.0 for eagle3" in m for m in eag.meaning["vllm"])
    assert eag.sglang.speculative_adaptive is True
    assert eag.sglang.speculative_adaptive_config == "./sglang_adaptive.json"
    # seeded from the plan: one slot per tier, never above the tier's D, starting at it
    assert eag.sglang_adaptive == {"1": {"candidate_steps": [1, 2, 3, 4]}, "5": {"candidate_steps": [2, 3]},
                                   "17": {"candidate_steps": [1]}, "49": {"candidate_steps": [0]}}
    starts = sglang_per_batch(eag.sglang, 64, eag.sglang_adaptive)
    assert starts == [wish(b) for b in range(1, 65)]
    assert all(max(sglang_adaptive_slot(eag.sglang_adaptive, b)["candidate_steps"]) == wish(b) for b in range(1, 65))
    assert any("schedule: static per batch size on TensorRT-LLM" in m for m in eag.meaning["trtllm"])
    assert plan("draft_model", speculation="adaptive").sglang.speculative_adaptive is None


def test_sglang_static_shape_starts_every_batch_at_num_steps():
    args = plan("eagle3").sglang
    assert sglang_per_batch(args, 64) == [4] * 64 and sglang_draft_len(args, 64) == 4


def test_expert_parallel_is_written_as_each_engine_setting():
    cfg = plan("draft_model", tp=4, ep=2)
    llm = emit.llm_api_data(cfg.llm_api)
    assert (llm["tensor_parallel_size"], llm["moe_expert_parallel_size"], llm["moe_tensor_parallel_size"]) == (4, 2, 2)
    assert cfg.sglang.ep_size == 2 and "--ep-size 2\n" in cfg.sglang.to_text()
    assert cfg.vllm.enable_expert_parallel is None  # vLLM's EP spans all TP x DP ranks: 2 of 4 has no layout
    assert any("--ep 2 of --tp 4 has no vLLM layout" in n for n in cfg.notes)
    full = plan("draft_model", tp=2, ep=2)
    assert full.vllm.enable_expert_parallel is True and full.vllm.tensor_parallel_size == 2
    assert "moe_expert_parallel_size" not in emit.llm_api_data(plan("draft_model", tp=2).llm_api)


def test_ep_must_divide_tp_in_plan_and_build():
    with pytest.raises(ValueError, match="--ep must be a positive integer that divides --tp 4, got 3"):
        Parallelism(tp=4, ep=3)
    with pytest.raises(ValueError, match="--ep must be a positive integer that divides --tp 4, got 3"):
        _opts("draft_model", tp=4, ep=3)


def test_plan_and_build_share_the_parallel_options():
    from trtspec.cli.build import build
    from trtspec.cli.plan import plan as plan_cmd

    def opt(cmd, name):
        return next(p for p in cmd.params if p.name == name)

    for name in ("tp", "ep"):
        a, b = opt(build, name), opt(plan_cmd, name)
        assert (a.default, a.help, a.type) == (b.default, b.help, b.type)


def test_dflash_draft_len_is_capped_at_block_minus_one():
    facts = dflash_facts(block=4)
    with pytest.raises(ValueError, match=r"the recipe plans D=4, but the draft's block size is 4 \(it drafts at most "
                                         r"block_size - 1 = 3"):
        plan("dflash", facts=facts)
    cfg = plan("dflash", facts=facts, recipe=FakeRecipe(draft_len_schedule={4: 3, 48: 1}, max_draft_len=3,
                                                        vllm_schedule={4: 3, 48: 1}))
    assert cfg.vllm.speculative_config.num_speculative_tokens == 3 and cfg.sglang.speculative_num_draft_tokens == 4


# --- inputs refused at validate, before any quantization ---------------------------------------------------------


def _draft(root: Path, config: dict) -> Path:
    from safetensors.torch import save_file
    import torch

    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    save_file({"main_proj.weight": torch.zeros(4, 4)}, str(root / "model.safetensors"))
    return root


def test_draft_without_model_type_is_refused_at_validate(tmp_path, monkeypatch):
    from trtspec.zoo import demo_pair

    target, _ = demo_pair("draft_model")
    draft = _draft(tmp_path / "d", {"architectures": ["DFlashDraftModel"],
                                    "dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    opts = BuildOptions(target=Path(target), draft=draft, drafter="dflash", out=tmp_path / "o")
    with pytest.raises(BuildInputError, match=r"--draft .*: config.json has no 'model_type' \(architectures "
                                              r"DFlashDraftModel\); vLLM reads every draft"):
        validate(opts)


def test_dflash_auto_recipe_is_planned_up_to_block_minus_one(tmp_path, monkeypatch):
    """The planner's search for a DFlash draft stops at block_size - 1 (max_draft_len passed to the resolver)."""
    from trtspec.builder import pipeline
    from trtspec.zoo import demo_pair

    monkeypatch.setattr(quantize, "quantize_and_export", lambda *a, **k: pytest.fail("quantization started"))
    target, _ = demo_pair("draft_model")
    draft = _draft(tmp_path / "d", {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
                                    "dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    seen = []

    def resolver(spec, **kw):
        seen.append(kw.get("max_draft_len"))
        return FakeRecipe(draft_len_schedule={4: 3, 48: 1}, max_draft_len=3, vllm_schedule={4: 3, 48: 1})

    opts = BuildOptions(target=Path(target), draft=draft, drafter="dflash", out=tmp_path / "o", quant="none",
                        acceptance="rates=0.6,0.5,0.4")
    res = pipeline.build(opts, quiet=True, dry_run=True, recipe_resolver=resolver)
    assert seen == [3] and res.plan["recipe"]["max_draft_len"] == 3


def test_expert_parallel_on_a_dense_target_is_refused_at_validate(tmp_path):
    from trtspec.zoo import demo_pair

    target, draft = demo_pair("draft_model")
    opts = BuildOptions(target=Path(target), draft=Path(draft), tp=2, ep=2, out=tmp_path / "o")
    with pytest.raises(BuildInputError, match=r"--ep 2: the target has no MoE experts \(its config.json states none "
                                              r"of num_local_experts, num_experts, n_routed_experts\)"):
        validate(opts)


def test_dflash_recipe_above_the_block_is_refused_before_quantization(tmp_path, monkeypatch):
    from trtspec.builder import pipeline
    from trtspec.builder.pipeline import BuildError
    from trtspec.zoo import demo_pair

    monkeypatch.setattr(quantize, "quantize_and_export", lambda *a, **k: pytest.fail("quantization started"))
    target, _ = demo_pair("draft_model")
    draft = _draft(tmp_path / "d", {"architectures": ["DFlashDraftModel"], "model_type": "qwen3",
                                    "dflash_config": {"target_layer_ids": [1, 4], "block_size": 4}})
    opts = BuildOptions(target=Path(target), draft=draft, drafter="dflash", out=tmp_path / "o", recipe="r.yaml")
    with pytest.raises(BuildError, match=r"stage 'recipe'.*the recipe plans D=4, but the draft's block size is 4"):
        pipeline.build(opts, quiet=True, recipe_resolver=lambda spec, **kw: FakeRecipe())
    assert not (tmp_path / "o").exists()


def test_build_plans_with_the_same_ep_as_plan(tmp_path, monkeypatch):
    """``build --tp 2 --ep 2`` hands ep to the planner's request (as ``trtspec plan --ep 2`` builds it)."""
    from trtspec.builder import pipeline
    from trtspec.recipes import api
    from trtspec.zoo import demo_pair

    target, draft = demo_pair("draft_model")
    moe = tmp_path / "moe"
    import shutil

    shutil.copytree(target, moe)
    cfg = json.loads((moe / "config.json").read_text())
    cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)
    (moe / "config.json").write_text(json.dumps(cfg))
    seen = []
    real = api.build_request
    monkeypatch.setattr(api, "build_request", lambda **kw: seen.append(kw["ep"]) or real(**kw))
    opts = BuildOptions(target=moe, draft=Path(draft), tp=2, ep=2, quant="none", out=tmp_path / "o",
                        acceptance="rates=0.7,0.6,0.5", max_batch_size=16)
    res = pipeline.build(opts, quiet=True, dry_run=True)
    assert seen == [2] and res.plan["recipe"]["max_draft_len"] >= 1
