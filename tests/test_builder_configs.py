"""The pydantic models of the emitted serving configs and the emitters that fill them from a recipe."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from trtspec.builder import emit
from trtspec.builder.draft_config import DrafterFacts, read_block_draft
from trtspec.builder.options import BuildOptions
from trtspec.builder.sglang_config import SglangArgs
from trtspec.builder.trtllm_config import (LlmApiConfig, default_graph_batch_sizes, graph_batch_sizes,
                                           validate_llm_api_yaml)
from trtspec.builder.vllm_config import VllmSpeculativeConfig, schedule_to_ranges


@dataclass
class FakeRecipe:
    """The fields of trtspec.recipes.api.Recipe the builder reads."""

    draft_len_schedule: dict = field(default_factory=lambda: {4: 4, 16: 3, 48: 1})
    max_draft_len: int = 4
    max_concurrency: int | None = None
    vllm_schedule: dict = field(default_factory=lambda: {4: 4, 16: 3, 48: 1})
    sglang: dict = field(default_factory=lambda: {"speculative_num_steps": 4, "speculative_eagle_topk": 1,
                                                  "speculative_num_draft_tokens": 5})
    rows: list = field(default_factory=list)

    def to_dict(self):
        return {"draft_len_schedule": self.draft_len_schedule, "max_draft_len": self.max_draft_len}

    def save(self, path):
        Path(path).write_text(yaml.safe_dump(self.to_dict()))


def _opts(drafter="draft_model", **kw):
    draft = Path("d") if drafter in ("draft_model", "eagle3", "dflash", "dspark") else None
    kw.setdefault("max_seq_len", 4096)
    return BuildOptions(target=Path("t"), draft=draft, drafter=drafter, **kw)


def dspark_facts(config=None) -> DrafterFacts:
    """DrafterFacts of a DSpark draft whose config.json is ``config`` (default: block 4, layers [0, 1])."""
    config = config or {"dspark_block_size": 4, "dspark_target_layer_ids": [0, 1]}
    block = read_block_draft(config, "dspark")
    return DrafterFacts(layer_ids=block.target_layer_ids, block=block)


def _spec(**kw):
    return {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "./draft", **kw}


def test_schedule_smallest_key_must_equal_max_draft_len():
    with pytest.raises(ValidationError, match=r"draft_len_schedule\[2\] must equal max_draft_len"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64, speculative_config=_spec(draft_len_schedule={2: 3, 8: 1}))


def test_schedule_value_above_max_draft_len_rejected():
    with pytest.raises(ValidationError, match="must be <= max_draft_len"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64, speculative_config=_spec(draft_len_schedule={2: 4, 8: 5}))


def test_schedule_and_max_concurrency_are_exclusive():
    with pytest.raises(ValidationError, match="mutually exclusive"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64,
                     speculative_config=_spec(draft_len_schedule={2: 4}, max_concurrency=8))


def test_schedule_is_sorted_by_threshold():
    c = LlmApiConfig(max_batch_size=64, max_seq_len=64, speculative_config=_spec(draft_len_schedule={32: 1, 4: 4, 8: 2}))
    assert list(c.speculative_config.draft_len_schedule) == [4, 8, 32]


def test_ngram_rejects_schedule_but_takes_max_concurrency():
    with pytest.raises(ValidationError, match="does not support draft_len_schedule"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64,
                     speculative_config={"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {4: 4}})
    LlmApiConfig(max_batch_size=8, max_seq_len=64,
                 speculative_config={"decoding_type": "NGram", "max_draft_len": 4, "max_concurrency": 4})


def test_graph_batch_sizes_must_include_thresholds():
    with pytest.raises(ValidationError, match="missing \\[12\\]"):
        LlmApiConfig(max_batch_size=16, max_seq_len=64,
                     cuda_graph_config={"batch_sizes": [1, 2, 4, 8, 16], "max_batch_size": 16},
                     speculative_config=_spec(draft_len_schedule={4: 4, 12: 2}))


def test_dynamic_tree_total_tokens_bounds():
    spec = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "./draft", "use_dynamic_tree": True,
            "dynamic_tree_max_topK": 2}
    LlmApiConfig(max_batch_size=8, max_seq_len=64, speculative_config={**spec, "max_total_draft_tokens": 6})
    with pytest.raises(ValidationError, match=r"must be in \[max_draft_len \(3\), dynamic_tree_max_topK"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64, speculative_config={**spec, "max_total_draft_tokens": 7})


def test_unknown_field_and_bad_kv_dtype_rejected():
    with pytest.raises(ValidationError, match="Extra inputs"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64, speculative_config=_spec(num_eagle_layers=2))
    with pytest.raises(ValidationError, match="kv_cache_config.dtype must be one of"):
        LlmApiConfig(max_batch_size=8, max_seq_len=64, kv_cache_config={"dtype": "int4"})


def test_default_graph_sizes_follow_trtllm_padding_rule():
    assert default_graph_batch_sizes(16) == [1, 2, 4, 8, 16]
    assert default_graph_batch_sizes(300) == [1, 2, 4] + [8 * i for i in range(1, 17)] + [192, 256, 300]
    assert graph_batch_sizes(64, {5: 4, 100: 1}) == [1, 2, 4, 5, 8, 16, 24, 32, 40, 48, 56, 64]


@pytest.mark.parametrize("drafter", ["draft_model", "eagle3", "mtp", "ngram", "sa", "dflash", "dspark"])
def test_every_drafter_emits_valid_configs(tmp_path, drafter):
    """Default versions (TensorRT-LLM main-0004396, vLLM 0.33.0, SGLang 0.5.23): the recipe's {4: 4, 16: 3, 48: 1}
    at max_batch_size 64. One-engine drafters get D=1 instead of the implicit 0 above 48 (no runtime floor on that
    version); NGram keeps its cut-off; DSpark drafts its block at every batch; vLLM runs suffix decoding (sa) on
    Model Runner V1, which drops per-batch ranges, so none are written; SGLang has no SA algorithm."""
    recipe = FakeRecipe()
    opts = _opts(drafter, max_batch_size=64, kv_cache_quant="fp8")
    facts = dspark_facts() if drafter == "dspark" else DrafterFacts(layer_ids=[0, 1], mtp_layers=1)
    if drafter == "dflash":
        facts = DrafterFacts(layer_ids=[0, 1], block=read_block_draft({"dflash_config": {"block_size": 8}}, "dflash"))
    written = emit.write_configs(tmp_path, recipe, opts, facts=facts)
    cfg = validate_llm_api_yaml(tmp_path / "llm_api.yaml")
    spec = cfg.speculative_config
    assert spec.decoding_type == emit.DECODING_TYPES[drafter]
    assert spec.max_draft_len == recipe.max_draft_len
    assert cfg.kv_cache_config.dtype == "fp8"
    raw = yaml.safe_load((tmp_path / "llm_api.yaml").read_text())["speculative_config"]
    assert "max_total_draft_tokens" not in raw  # a chain: TensorRT-LLM sets it to max_draft_len itself
    if drafter == "ngram":
        assert spec.max_concurrency == 48 and spec.draft_len_schedule is None
    elif drafter == "dspark":
        assert spec.max_concurrency is None and spec.draft_len_schedule is None
    else:
        assert spec.draft_len_schedule == {4: 4, 16: 3, 64: 1} and spec.max_concurrency is None
        assert set(spec.draft_len_schedule) <= set(cfg.cuda_graph_config.batch_sizes)
    assert (spec.speculative_model == "./draft") == (drafter in ("draft_model", "eagle3", "dflash", "dspark"))
    if written["vllm"] is not None:
        raw = yaml.safe_load((tmp_path / "vllm.yaml").read_text())
        v = VllmSpeculativeConfig.model_validate(raw["speculative_config"])
        if drafter in ("dspark", "sa"):
            assert v.num_speculative_tokens == 4 and v.num_speculative_tokens_per_batch_size is None
        else:
            assert [tuple(r) for r in v.num_speculative_tokens_per_batch_size] == \
                [(1, 4, 4), (5, 16, 3), (17, 48, 1), (49, 64, 0)]
    else:
        assert not (tmp_path / "vllm.yaml").exists()
    if written["sglang"] is not None:
        args = SglangArgs.from_text((tmp_path / "sglang.args").read_text())
        assert args.kv_cache_dtype == "fp8_e4m3"
        if drafter in ("dflash", "dspark"):  # one block of D + 1 tokens, steps and top-k 1
            assert (args.speculative_num_steps, args.speculative_num_draft_tokens) == (1, 5)
        else:
            assert args.speculative_num_steps == 4
    else:
        assert drafter == "sa"


def test_eagle3_tree_recipe_emits_dynamic_tree(tmp_path):
    recipe = FakeRecipe(sglang={"speculative_num_steps": 4, "speculative_eagle_topk": 4,
                                "speculative_num_draft_tokens": 9})
    cfg = emit.plan_configs(recipe, _opts("eagle3", max_batch_size=64), DrafterFacts(layer_ids=[1, 3, 5])).llm_api
    s = cfg.speculative_config
    assert (s.use_dynamic_tree, s.dynamic_tree_max_topK, s.max_total_draft_tokens) == (True, 4, 8)
    assert s.eagle3_layers_to_capture == [1, 3, 5]
    SglangArgs.from_text(emit.plan_configs(recipe, _opts("eagle3")).sglang.to_text())


def test_max_concurrency_recipe_without_schedule(tmp_path):
    """max_concurrency 32 would turn a one-engine drafter off above 32: on main-0004396 it becomes a D=1 tier,
    on the PR #16888 branch it is kept (the runtime floors at 1 there); NGram keeps it on both."""
    recipe = FakeRecipe(draft_len_schedule={}, vllm_schedule={}, max_concurrency=32)
    s = emit.plan_configs(recipe, _opts()).llm_api.speculative_config
    assert s.draft_len_schedule == {32: 4, 256: 1} and s.max_concurrency is None
    s = emit.plan_configs(recipe, _opts(trtllm_version="pr16888-011d093")).llm_api.speculative_config
    assert s.draft_len_schedule is None and s.max_concurrency == 32
    for version in ("main-0004396", "pr16888-011d093"):
        s = emit.plan_configs(recipe, _opts("ngram", trtllm_version=version)).llm_api.speculative_config
        assert s.draft_len_schedule is None and s.max_concurrency == 32


def test_vllm_ranges_and_validation():
    assert schedule_to_ranges({8: 2, 2: 5}) == [(1, 2, 5), (3, 8, 2)]
    assert schedule_to_ranges({1: 4, 2: 4, 4: 3, 8: 3, 16: 0}) == [(1, 2, 4), (3, 8, 3), (9, 16, 0)]
    with pytest.raises(ValidationError, match="contiguous from 1"):
        VllmSpeculativeConfig(method="draft_model", model="./d", num_speculative_tokens=4,
                              num_speculative_tokens_per_batch_size=[(2, 4, 4)])
    with pytest.raises(ValidationError, match="model is required"):
        VllmSpeculativeConfig(method="eagle3", num_speculative_tokens=4)


def test_sglang_chain_token_count_rule():
    with pytest.raises(ValidationError, match="num_steps \\+ 1 = 4"):
        SglangArgs(model_path="t", max_running_requests=8, context_length=64, speculative_algorithm="STANDALONE",
                   speculative_num_steps=3, speculative_num_draft_tokens=5, speculative_draft_model_path="d")
    with pytest.raises(ValidationError, match="Extra inputs"):
        SglangArgs.from_text("--model-path t --max-running-requests 8 --context-length 64 "
                             "--speculative-algorithm NGRAM --speculative-num-steps 3 "
                             "--speculative-num-draft-tokens 4 --speculative-typo 1")
