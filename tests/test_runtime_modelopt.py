"""An EAGLE-3 head exported by NVIDIA Model-Optimizer itself loads and decodes losslessly."""
from __future__ import annotations

import copy

import pytest
import torch

from runtime_fixtures import byte_tokenizer, make_model, ragged_prompts, single_thread  # noqa: F401


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    mtsp = pytest.importorskip("modelopt.torch.speculative")
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG
    import transformers

    root = tmp_path_factory.mktemp("modelopt")
    target = make_model(root / "target", seed=1, init=0.1, tie=False, layers=4)
    model = transformers.LlamaForCausalLM.from_pretrained(target).eval()
    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    cfg["eagle_architecture_config"].update(
        {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "draft_vocab_size": 200})
    mtsp.convert(model, [("eagle", cfg)])
    with torch.no_grad():                              # a random head; d2t: a valid draft -> target map
        model.eagle_module.d2t.copy_(torch.sort(torch.randperm(256)[:200]).values - torch.arange(200))
    model.get_exporter().export(root / "eagle")        # writes config.json + model.safetensors
    return target, root / "eagle"


def test_modelopt_export_loads_and_decodes_losslessly(exported):
    from trtspec.runtime import load_pipeline

    target, eagle = exported
    pipe = load_pipeline(target, eagle, drafter="eagle3", tree="topk=2,depth=3")
    head = pipe.drafter.head
    assert head.config.draft_vocab_size == 200 and head.config.aux_layer_ids == (0, 1)
    assert head.config.layer.rope.kind == "yarn"        # Model-Optimizer's export rope override
    prompts = ragged_prompts(3, seed=2)
    base = load_pipeline(target, draft_len=0)
    got = [o for o, _ in pipe.generate_ids(prompts, max_new_tokens=12)]
    assert got == [o for o, _ in base.generate_ids(prompts, max_new_tokens=12)]
    assert pipe.last_stats.draft_tokens > 0
