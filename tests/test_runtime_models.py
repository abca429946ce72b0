"""Our decoder against transformers, the KV cache against a full recompute, and loading errors."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from runtime_fixtures import full_logits, make_eagle3, make_model, single_thread  # noqa: F401
from trtspec.runtime import masks
from trtspec.runtime.config import ModelFormatError
from trtspec.runtime.models import load_eagle3, load_model


@pytest.mark.parametrize("arch,kw", [
    ("llama", {}),
    ("llama", {"tie": True, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}}),
    ("qwen3", {}),
    ("qwen2", {}),
    ("mistral", {"kv_heads": 4}),
])
def test_logits_match_transformers(tmp_path, arch, kw):
    import transformers

    path = make_model(tmp_path / arch, arch=arch, seed=3, init=0.2, **kw)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours = load_model(path)
    ids = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    with torch.no_grad():
        expected = ref(torch.tensor([ids])).logits[0]
        got = full_logits(ours, ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_kv_cache_after_speculative_steps_matches_recompute(tmp_path):
    """Run several tree steps with ragged acceptance, then compare the cached logits of a new
    block with a from-scratch forward over the committed text."""
    from trtspec.runtime.drafters.draft_model import DraftModelDrafter
    from trtspec.runtime.engine import Engine
    from trtspec.runtime.params import SamplingParams, SpecConfig, TreeShape

    t = make_model(tmp_path / "t", seed=1, init=0.2)
    d = make_model(tmp_path / "d", seed=2, from_model=t, noise=0.05)
    target = load_model(t)
    eng = Engine(target, DraftModelDrafter(load_model(d)), SpecConfig(tree=TreeShape(2, 3)), max_batch_size=3)
    prompts = [[5, 6, 7], [9] * 11, [1, 2, 3, 4, 5, 6]]
    for i, p in enumerate(prompts):
        eng.add_request(i, p, SamplingParams(max_new_tokens=60))
    for _ in range(4):
        eng.step()
    assert eng.stats.accepted_tokens > 0          # the cache was compacted along accepted paths
    for r in eng.running:
        row = torch.tensor([r.row])
        lens = torch.tensor([r.cache_len])
        positions, write_idx, mask = masks.chain_block(lens, torch.tensor([1]), 1, eng.slots)
        hidden, _ = target(torch.tensor([[r.tokens[-1]]]), positions, eng.cache, row, write_idx, mask)
        torch.testing.assert_close(target.logits(hidden)[0, 0], full_logits(target, r.tokens)[-1], atol=1e-5, rtol=1e-5)


def test_eagle3_head_loads_model_optimizer_layout(tmp_path):
    t = make_model(tmp_path / "t", seed=1)
    e = make_eagle3(tmp_path / "e", t, aux_ids=(0, 1), draft_vocab=200)
    head = load_eagle3(e, load_model(t))
    assert head.config.aux_layer_ids == (0, 1)
    assert head.fc.weight.shape == (64, 128)
    ids = torch.arange(200) + head.d2t
    logits = head.target_logits(torch.zeros(1, 200))
    assert torch.isfinite(logits[0, ids]).all() and int(torch.isfinite(logits).sum()) == 200


def test_truncated_safetensors_is_a_clear_error(tmp_path):
    t = make_model(tmp_path / "t", seed=1)
    f = t / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(ModelFormatError, match="corrupt or truncated"):
        load_model(t)


def test_unsupported_architecture_lists_supported(tmp_path):
    t = make_model(tmp_path / "t", seed=1)
    cfg = json.loads((t / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (t / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match="unsupported architecture.*LlamaForCausalLM.*Qwen3ForCausalLM"):
        load_model(t)


def test_missing_files_are_clear_errors(tmp_path):
    t = make_model(tmp_path / "t", seed=1)
    with pytest.raises(ModelFormatError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    (t / "model.safetensors").rename(t / "pytorch_model.bin")
    with pytest.raises(ModelFormatError, match="pickled checkpoints are not loaded"):
        load_model(t)
    shutil.rmtree(t)
    t.mkdir()
    with pytest.raises(ModelFormatError, match="missing config.json"):
        load_model(t)


def test_missing_tensor_and_wrong_shape(tmp_path):
    from safetensors.torch import load_file, save_file

    t = make_model(tmp_path / "t", seed=1)
    sd = load_file(str(t / "model.safetensors"))
    sd["model.norm.weight"] = torch.ones(3)
    save_file(sd, str(t / "model.safetensors"))
    with pytest.raises(ModelFormatError, match=r"model.norm.weight has shape \(3,\), expected \(64,\)"):
        load_model(t)
    del sd["model.norm.weight"]
    save_file(sd, str(t / "model.safetensors"))
    with pytest.raises(ModelFormatError, match="missing tensors.*model.norm.weight"):
        load_model(t)
