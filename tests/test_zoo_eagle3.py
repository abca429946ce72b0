"""EAGLE-3 head training for the demo target (trtspec.zoo.eagle3): the training forward is the runtime's
drafting, the export loads in the runtime and decodes losslessly, and the config fails loudly."""
from __future__ import annotations

import json

import pytest
import torch

from runtime_fixtures import make_eagle3, make_model, single_thread  # noqa: F401
from trtspec.runtime import masks
from trtspec.runtime.models import load_eagle3, load_model
from trtspec.zoo import eagle3 as E


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle3train")
    t = make_model(root / "target", seed=1, init=0.1, layers=3)
    target = load_model(t)
    head = load_eagle3(make_eagle3(root / "eagle", t, seed=4, aux_ids=(0, 2), draft_vocab=200, init=0.2), target)
    return target, head


def _runtime_draft_logits(target, head, x, g0, t, s):
    """Step ``s`` at index ``t`` through the runtime head with its KV cache: the committed entries 0..t
    (one chain block), then depths 1..s one node at a time, as the drafter feeds them."""
    cache = head.new_cache(1, 64)
    rows = torch.zeros(1, dtype=torch.long)
    n = t + 1
    pos, wi, mask = masks.chain_block(torch.tensor([0]), torch.tensor([n]), n, cache.slots)
    h, logits = head(target.embed(x[:, 1:n + 1]), g0[:, :n], pos, cache, rows, wi, mask)
    h, logits = h[:, -1:], logits[:, -1]
    for j in range(1, s + 1):
        p = torch.tensor([[t + j]])
        h, logits = head(target.embed(x[:, t + 1 + j:t + 2 + j]), h, p, cache, rows, p,
                         torch.ones(1, 1, t + j + 1, dtype=torch.bool))
        logits = logits[:, 0]
    return logits[0, head.target_ids()]


@torch.no_grad()
def test_ttt_forward_equals_runtime_drafting(tiny):
    target, head = tiny
    S, steps = 12, 3
    x = torch.randint(0, 256, (1, S), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(S)[None]
    _, aux = target(x, pos, target.new_cache(1, S), torch.zeros(1, dtype=torch.long), pos, masks.causal(S),
                    capture=head.config.aux_layer_ids)
    g0 = head.fc(aux)
    outs = E.ttt_forward(head, target.embed, x, g0, steps)
    assert [o.shape[1] for o in outs] == [S - 1, S - 2, S - 3]
    for s in range(steps):
        for t in (0, 3, S - 2 - s):
            ref = _runtime_draft_logits(target, head, x, g0, t, s)
            torch.testing.assert_close(outs[s][0, t].float(), ref, atol=2e-5, rtol=1e-4)


def test_choose_draft_vocab_maps_back():
    counts = torch.tensor([5, 9, 0, 9, 1, 7])
    ids, d2t = E.choose_draft_vocab(counts, 3)
    assert ids.tolist() == [1, 3, 5]                   # most frequent; ties broken by the lower id
    assert (torch.arange(3) + d2t).tolist() == ids.tolist()


def test_default_aux_layers():
    assert E.default_aux_layers(6) == (1, 3, 5)
    assert E.default_aux_layers(2) == (1,)
    assert E.default_aux_layers(1) == (0,)


@pytest.mark.parametrize("kw, msg", [
    ({"steps": 0}, "steps must be >= 1"),
    ({"prompt_tokens": 256}, r"prompt_tokens \(256\) must be < seq_len"),
    ({"selfgen": 2, "corpus": 2}, r"selfgen \+ corpus \(4\) must be >= batch_size"),
    ({"loss_decay": 0.0}, "loss_decay must be in"),
    ({"save_dtype": "fp8"}, "save_dtype: expected"),
])
def test_config_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        E.Eagle3TrainConfig(**kw)


def test_smoke_run_exports_a_lossless_head(tmp_path):
    from trtspec.runtime import load_pipeline
    from trtspec.zoo import demo_paths

    target_dir, _ = demo_paths()
    out = tmp_path / "head"
    res = E.run(E.Eagle3TrainConfig.smoke(), target_dir, out, log=lambda s: None)
    assert not out.with_name("head.partial").exists()
    assert sorted(p.name for p in out.iterdir()) == ["acceptance.json", "config.json", "measurements.json",
                                                      "model.safetensors"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 5]
    assert res["acceptance"]["greedy_match"] == 1.0
    prof = json.loads((out / "acceptance.json").read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == "eagle3"
    c = prof["counts"]                                # censoring-aware counts: a_k = accepted_k / reached_k
    assert prof["rates"] == pytest.approx([a / r if r else 0.0 for a, r in zip(c["accepted"], c["reached"])])
    assert prof["mean_al"] == pytest.approx(1 + sum(c["accepted"]) / c["reached"][0])
    pipe = load_pipeline(target_dir, out, drafter="eagle3", draft_len=2)
    assert pipe.drafter.head.config.draft_vocab_size == cfg["draft_vocab_size"]


def test_run_rejects_bad_target(tmp_path):
    with pytest.raises(FileNotFoundError, match="--target"):
        E.run(E.Eagle3TrainConfig.smoke(), tmp_path / "nope", tmp_path / "out", log=lambda s: None)


# ------------------------------------------------------------------------ the shipped demo head


def _expected_al(rates, D):
    al, joint = 1.0, 1.0
    for r in rates[:D]:
        joint *= r
        al += joint
    return al


def test_shipped_head_profile_is_consistent_and_beats_the_draft_model():
    from trtspec.zoo import demo_acceptance_path, demo_draft

    head = demo_draft("eagle3")
    prof = json.loads(demo_acceptance_path("eagle3").read_text())
    assert prof["format"] == "trtspec.acceptance/v1" and prof["drafter"] == "eagle3"
    joint = 1.0
    for r, j in zip(prof["rates"], prof["joint"]):
        joint *= r
        assert j == pytest.approx(joint, abs=1e-5)
    c = prof["counts"]
    assert prof["rates"] == pytest.approx([a / r if r else 0.0 for a, r in zip(c["accepted"], c["reached"])])
    meas = json.loads((head / "measurements.json").read_text())
    assert meas["acceptance"]["greedy_match"] == 1.0
    draft = json.loads(demo_acceptance_path().read_text())   # draft_model, same held-out prompts
    for D in (1, 4, 8):
        assert _expected_al(prof["rates"], D) > _expected_al(draft["rates"], D)


def test_shipped_head_decodes_losslessly():
    from tokenizers import Tokenizer

    from trtspec.runtime import load_pipeline
    from trtspec.zoo import data, demo_draft, demo_paths

    target, _ = demo_paths()
    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    prompts = data.function_prompts(data.CorpusSplit.build(), tok, 32, 64)[::8]
    base = load_pipeline(target, draft_len=0)
    pipe = load_pipeline(target, demo_draft("eagle3"), drafter="eagle3", draft_len=6)
    assert pipe.drafter.head.config.draft_vocab_size < pipe.target.config.vocab_size     # d2t in use
    got = [o for o, _ in pipe.generate_ids(prompts, max_new_tokens=32)]
    assert got == [o for o, _ in base.generate_ids(prompts, max_new_tokens=32)]
    assert pipe.last_stats.mean_al > 2.0


def test_demo_build_options_pick_the_head_and_its_profile(tmp_path):
    from trtspec.builder.options import BuildOptions
    from trtspec.builder.pipeline import demo_options
    from trtspec.zoo import demo_acceptance_path, demo_draft

    opts = demo_options(BuildOptions(drafter="eagle3", out=tmp_path / "b", cache_dir=tmp_path / "c"))
    assert opts.draft == demo_draft("eagle3") and opts.acceptance == str(demo_acceptance_path("eagle3"))
    with pytest.raises(ValueError, match="--target is required unless building the demo pair"):
        demo_options(BuildOptions(drafter="ngram", out=tmp_path / "b", cache_dir=tmp_path / "c"))
