"""The SGLang arguments a recipe carries are always a shape SGLang accepts (and the builder emits)."""
from __future__ import annotations

import pytest

from trtspec.builder.sglang_config import SglangArgs
from trtspec.recipes.api import resolve_recipe


@pytest.mark.parametrize("model,gpu,drafter,acceptance", [
    ("llama-3.1-70b", "h200", "eagle3", "rates=0.8,0.75,0.7,0.65,0.6,0.55,0.5,0.45"),
    ("llama-3.1-8b", "h100", "eagle3", "rates=0.9,0.85,0.8,0.75,0.7,0.65,0.6,0.55,0.5,0.45"),
    ("deepseek-r1", "b200", "mtp", "rates=0.8,0.6,0.4"),
])
def test_sglang_shape_matches_the_schedule(model, gpu, drafter, acceptance):
    r = resolve_recipe("auto", model=model, gpu=gpu, tp=8 if model == "deepseek-r1" else 1, quant="fp8",
                       drafter=drafter, acceptance=acceptance)
    sg = r.sglang
    assert sg["speculative_num_steps"] == r.max_draft_len
    if sg["speculative_eagle_topk"] == 1:   # a chain verifies its drafts plus the root
        assert sg["speculative_num_draft_tokens"] == r.max_draft_len + 1
    if r.max_draft_len:
        SglangArgs(model_path="target", max_running_requests=256, context_length=4096,
                   speculative_algorithm="EAGLE3", speculative_draft_model_path="draft", **sg)


def test_demo_pair_recipe_gives_a_valid_chain():
    """The demo pair on H200: the smallest batch's best D differs from the schedule's max_draft_len
    (the schedule is made non-increasing), which once produced num_draft_tokens = max_draft_len."""
    from trtspec.zoo import demo_paths

    target, draft = demo_paths()
    r = resolve_recipe("auto", model=target, gpu="h200", quant="fp8", drafter="draft_model", draft_model=draft,
                       acceptance=str(target.parent / "acceptance.json"))
    assert r.max_draft_len >= 1
    assert r.sglang["speculative_eagle_topk"] == 1
    assert r.sglang["speculative_num_draft_tokens"] == r.max_draft_len + 1
    SglangArgs(model_path="target", max_running_requests=256, context_length=512, speculative_algorithm="STANDALONE",
               speculative_draft_model_path="draft", **r.sglang)
