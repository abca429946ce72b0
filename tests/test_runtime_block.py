"""DFlash / DSpark block drafting in the runtime: one block forward over cached context K/V equals the
step-by-step reference, verification stays lossless, sampling is reproducible, and bad heads are refused
before any weight loads."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from block_fixtures import make_block_head, target_features
from runtime_fixtures import byte_tokenizer, make_model, ragged_prompts, single_thread  # noqa: F401
from trtspec.runtime import load_pipeline
from trtspec.runtime.block_head import block_drafts, capture_features, read_block_config
from trtspec.runtime.config import ModelFormatError
from trtspec.runtime.drafters.base import DraftMode
from trtspec.runtime.drafters.block_reference import block_logits, greedy_block_draft
from trtspec.runtime.sampling import generators, probs


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("block") / "target", seed=3, layers=4, init=0.15)


HEADS = {
    "dflash": dict(drafter="dflash", block_size=5, layer_ids=(0, 2)),
    "dflash-causal-last": dict(drafter="dflash", block_size=4, layer_ids=(1, 3), causal=True),
    "dspark-vanilla": dict(drafter="dspark", block_size=4, layer_ids=(0, 2)),
    "dspark-gated": dict(drafter="dspark", block_size=3, layer_ids=(1,), markov_head="gated"),
    "dspark-rnn": dict(drafter="dspark", block_size=4, layer_ids=(0, 3), markov_head="rnn", confidence=False),
}


@pytest.fixture(scope="module", params=sorted(HEADS))
def head(request, target_dir, tmp_path_factory):
    kw = HEADS[request.param]
    return kw["drafter"], make_block_head(tmp_path_factory.mktemp("head") / request.param, target_dir, seed=5, **kw)


def _reference(pipe, r):
    """The reference's greedy drafts and logits for request ``r`` (context = every token but the root)."""
    d = pipe.drafter
    cfg, target = d.head.config, pipe.target
    ctx = r.tokens[:-1]
    aux = (target_features(target, ctx, cfg.target_layer_ids) if ctx else
           torch.zeros(0, len(cfg.target_layer_ids) * target.config.hidden_size))
    aux = capture_features(target, cfg, aux)
    sd = {k: v for k, v in d.head.state_dict().items()}
    return greedy_block_draft(sd, cfg, target.model.embed_tokens.weight, target.lm_head.weight, aux, r.tokens[-1])


def _engine_after_steps(pipe, prompts, steps):
    eng = pipe.engine(max_batch_size=len(prompts))
    for i, p in enumerate(prompts):
        eng.add_request(i, p, pipe.params(max_new_tokens=40))
    for _ in range(steps):
        eng.step()
    return eng


@pytest.mark.parametrize("steps", [0, 3])
def test_block_draft_equals_step_by_step_reference(target_dir, head, steps):
    drafter, path = head
    pipe = load_pipeline(target_dir, path, drafter=drafter)
    prompts = ragged_prompts(4, seed=7, lo=1, hi=11)
    eng = _engine_after_steps(pipe, prompts, steps)
    if steps == 0:
        eng._admit()
    reqs = list(eng.running)
    D = pipe.drafter.max_draft_len
    depths = [D, 1, D - 1, D][:len(reqs)]
    prop = eng.drafter.propose(reqs, depths, 1, DraftMode(sample=False))
    assert prop.num_nodes.tolist() == [d + 1 for d in depths]
    for i, r in enumerate(reqs):
        ref, ref_logits = _reference(eng, r)
        assert len(ref) == D == block_drafts(drafter, eng.drafter.head.config.block_size)
        assert prop.tokens[i, 0].item() == r.tokens[-1]
        assert prop.tokens[i, 1:depths[i] + 1].tolist() == ref[:depths[i]]


def test_context_kv_is_extended_not_recomputed(target_dir, head):
    """After several accepted steps the cached context equals a fresh prefill of the same tokens."""
    drafter, path = head
    pipe = load_pipeline(target_dir, path, drafter=drafter)
    prompts = ragged_prompts(3, seed=11, lo=2, hi=9)
    eng = _engine_after_steps(pipe, prompts, 4)
    fresh = pipe.engine(max_batch_size=3)
    for r in eng.running:
        fresh.add_request(r.request_id, r.tokens, pipe.params(max_new_tokens=2))
    fresh._admit()
    for r, f in zip(eng.running, fresh.running):
        n = len(r.tokens) - 1
        assert eng.drafter.ctx[r.row] == n == fresh.drafter.ctx[f.row]
        torch.testing.assert_close(eng.drafter.cache.k[:, r.row, :, :n], fresh.drafter.cache.k[:, f.row, :, :n],
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(eng.drafter.cache.v[:, r.row, :, :n], fresh.drafter.cache.v[:, f.row, :, :n],
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("verify", ["greedy", "block", "sample"])
def test_greedy_output_equals_target_alone(target_dir, head, verify):
    drafter, path = head
    prompts = ragged_prompts(5, seed=2, lo=1, hi=12)
    base = load_pipeline(target_dir, draft_len=0).generate_ids(prompts, max_new_tokens=30)
    pipe = load_pipeline(target_dir, path, drafter=drafter, verify=verify)
    got = pipe.generate_ids(prompts, max_new_tokens=30)
    assert [g for g, _ in got] == [b for b, _ in base]
    assert pipe.last_stats.draft_tokens > 0


def test_sampled_output_is_reproducible_and_independent_of_the_batch(target_dir, head):
    drafter, path = head
    prompts = ragged_prompts(4, seed=5, lo=2, hi=10)
    pipe = load_pipeline(target_dir, path, drafter=drafter, verify="block")
    kw = dict(max_new_tokens=24, temperature=0.9, top_p=0.95, seed=17)
    a = [g for g, _ in pipe.generate_ids(prompts, **kw)]
    b = [g for g, _ in pipe.generate_ids(prompts, **kw)]
    assert a == b
    eng = pipe.engine(max_batch_size=1, seed=17)
    eng.add_request("x", prompts[2], pipe.params(max_new_tokens=24, temperature=0.9, top_p=0.95, seed=99))
    alone = []
    while eng.has_work():
        for o in eng.step():
            alone += o.new_token_ids
    eng = pipe.engine(max_batch_size=4, seed=17)
    for i, p in enumerate(prompts):
        eng.add_request(i, p, pipe.params(max_new_tokens=24, temperature=0.9, top_p=0.95, seed=99 if i == 2 else i))
    together = {i: [] for i in range(4)}
    while eng.has_work():
        for o in eng.step():
            together[o.request_id] += o.new_token_ids
    assert together[2] == alone


def test_sampled_drafts_come_with_the_distributions_they_were_drawn_from(target_dir, head):
    """Draft probabilities are the block's transformed per-position distributions (DSpark: given the drafts before)."""
    drafter, path = head
    pipe = load_pipeline(target_dir, path, drafter=drafter)
    eng = _engine_after_steps(pipe, ragged_prompts(2, seed=9, lo=3, hi=8), 2)
    reqs = list(eng.running)
    for r in reqs:
        r.params = pipe.params(max_new_tokens=40, temperature=0.7, top_k=20)
    D = eng.drafter.max_draft_len
    mode = DraftMode(sample=True, generators=tuple(generators([(123, 0), (456, 0)], "cpu")))
    prop = eng.drafter.propose(reqs, [D, D], 1, mode)
    cfg = eng.drafter.head.config
    for i, r in enumerate(reqs):
        ctx = r.tokens[:-1]
        aux = capture_features(pipe.target, cfg, target_features(pipe.target, ctx, cfg.target_layer_ids))
        sd = eng.drafter.head.state_dict()
        logits, hidden = block_logits(sd, cfg, pipe.target.model.embed_tokens.weight, pipe.target.lm_head.weight,
                                      aux, r.tokens[-1])
        drafts = prop.tokens[i, 1:].tolist()
        for k in range(D):
            if drafter == "dflash":
                row = logits[k + 1]
            else:
                from trtspec.runtime.drafters.block_reference import markov_bias

                state = None
                prev = r.tokens[-1]
                for j in range(k + 1):
                    bias, state = markov_bias(sd, cfg, prev, hidden[j], state)
                    prev = drafts[j]
                row = logits[k] + bias.float()
            want = probs(row, 0.7, 20)
            torch.testing.assert_close(prop.draft_probs[i, k], want, atol=2e-5, rtol=1e-4)
            assert want[drafts[k]] > 0


def test_d_is_never_more_than_the_block_gives(target_dir, tmp_path):
    path = make_block_head(tmp_path / "h", target_dir, drafter="dflash", block_size=4)
    assert load_pipeline(target_dir, path, drafter="dflash").spec.draft_len == 3     # default: the whole block
    assert load_pipeline(target_dir, path, drafter="dflash", draft_len=2).spec.draft_len == 2
    with pytest.raises(ValueError, match="draft_len 4 exceeds .* block_size 4 -> 3 drafts"):
        load_pipeline(target_dir, path, drafter="dflash", draft_len=4)
    with pytest.raises(ValueError, match="draft_len 5 exceeds"):
        load_pipeline(target_dir, path, drafter="dflash", draft_len_schedule={1: 5, 4: 2})
    sp = make_block_head(tmp_path / "s", target_dir, drafter="dspark", block_size=4)
    assert load_pipeline(target_dir, sp, drafter="dspark").spec.draft_len == 4
    with pytest.raises(ValueError, match="proposes chains only"):
        load_pipeline(target_dir, sp, drafter="dspark", draft_len=None, tree="topk=2,depth=2")


def test_dspark_confidence_head_and_cut(target_dir, tmp_path):
    from trtspec.runtime.drafters.block import block_drafter

    path = make_block_head(tmp_path / "s", target_dir, drafter="dspark", block_size=4, confidence=True)
    pipe = load_pipeline(target_dir, path, drafter="dspark")
    eng = _engine_after_steps(pipe, ragged_prompts(3, seed=4, lo=2, hi=8), 2)
    reqs = list(eng.running)
    prop = eng.drafter.propose(reqs, [4, 4, 4], 1, DraftMode(sample=False))
    conf = eng.drafter.last_confidence
    assert conf.shape == (3, 4) and bool(((conf > 0) & (conf < 1)).all())
    h = eng.drafter.head
    prev = torch.cat([prop.tokens[:, :1], prop.tokens[:, 1:4]], 1)                     # d_0 = root, d_1..d_3
    roots, hidden = eng.drafter.block(reqs)
    for k in range(4):
        torch.testing.assert_close(conf[:, k], h.confidence(prev[:, k], hidden[:, k]))
    cut = float(conf.median())
    cutter = block_drafter(path, pipe.target, min_confidence=cut)
    cutter.reserve(3, eng.slots)
    cutter.ctx, cutter.cache = eng.drafter.ctx, eng.drafter.cache
    short = cutter.propose(reqs, [4, 4, 4], 1, DraftMode(sample=False))
    low = conf < cut
    for i in range(3):
        first = int(low[i].float().argmax()) if bool(low[i].any()) else 4
        assert short.num_nodes[i].item() - 1 == max(1, first)
        assert short.tokens[i].tolist() == prop.tokens[i].tolist()
    with pytest.raises(ValueError, match="min_confidence needs a confidence head"):
        block_drafter(make_block_head(tmp_path / "n", target_dir, drafter="dspark", confidence=False), pipe.target,
                      min_confidence=0.5)


def _corrupt_weights(path):
    (path / "model.safetensors").write_bytes(b"not a safetensors file")


@pytest.mark.parametrize("overrides, field", [
    ({"dflash_config": {"mask_token_id": 3, "target_layer_ids": [0, 9]}}, r"target_layer_ids \[9\] outside"),
    ({"block_size": 1}, "block_size=1; a block drafter needs block_size >= 2"),
    ({"dflash_config": {"mask_token_id": 256, "target_layer_ids": [0, 1]}}, r"mask_token_id=256 is outside"),
    ({"dflash_config": {"mask_token_id": 3}}, "dflash_config.target_layer_ids must be a non-empty list"),
    ({"vocab_size": 300}, "vocab_size=300 differs from the target's 256"),
    ({"architectures": ["LlamaForCausalLMEagle3"]}, "is not a block draft"),
])
def test_bad_heads_are_refused_before_any_weight_loads(target_dir, tmp_path, overrides, field):
    path = make_block_head(tmp_path / "h", target_dir, config_overrides=overrides)
    _corrupt_weights(path)
    with pytest.raises(ModelFormatError, match=field):
        load_pipeline(target_dir, path, drafter="dflash")


def test_tokenizer_mismatch_is_refused_before_any_weight_loads(target_dir, tmp_path):
    path = make_block_head(tmp_path / "h", target_dir)
    byte_tokenizer(200).save(str(path / "tokenizer.json"))
    _corrupt_weights(path)
    with pytest.raises(ModelFormatError, match="tokenizer mismatch"):
        load_pipeline(target_dir, path, drafter="dflash")
    shutil.copy(target_dir / "tokenizer.json", path / "tokenizer.json")
    with pytest.raises(ModelFormatError, match="corrupt or truncated"):      # the checks passed; then the load fails
        load_pipeline(target_dir, path, drafter="dflash")


def test_head_trained_for_another_tokenizer_is_refused_before_any_weight_loads(target_dir, tmp_path):
    from trtspec.runtime.api import Tokenizer
    from trtspec.runtime.drafters.block import vocab_digest

    path = make_block_head(tmp_path / "h", target_dir)
    (path / "train_draft.json").write_text(json.dumps({"target_tokenizer_vocab_sha256":
                                                       vocab_digest(byte_tokenizer(200).get_vocab())}))
    _corrupt_weights(path)
    with pytest.raises(ModelFormatError, match="tokenizer mismatch: .*train_draft.json says the head was trained"):
        load_pipeline(target_dir, path, drafter="dflash")
    (path / "train_draft.json").write_text(json.dumps({"target_tokenizer_vocab_sha256":
                                                       vocab_digest(Tokenizer(target_dir).vocab())}))
    with pytest.raises(ModelFormatError, match="corrupt or truncated"):      # the record matches; the load fails
        load_pipeline(target_dir, path, drafter="dflash")


def test_wrong_drafter_for_the_head_is_named(target_dir, tmp_path):
    path = make_block_head(tmp_path / "s", target_dir, drafter="dspark")
    with pytest.raises(ModelFormatError, match="a dspark head .* pass --drafter dspark"):
        load_pipeline(target_dir, path, drafter="dflash")


def test_unsupported_export_features_are_named(tmp_path, target_dir):
    path = make_block_head(tmp_path / "h", target_dir, config_overrides={
        "dflash_config": {"mask_token_id": 3, "target_layer_ids": [0, 1], "attention_sink_bias": True}})
    with pytest.raises(ModelFormatError, match="attention_sink_bias"):
        read_block_config(path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["dflash_config"] = {"mask_token_id": 3, "target_layer_ids": [0, 1], "projector_type": "domino"}
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelFormatError, match="projector_type 'domino'"):
        read_block_config(path)


def test_block_drafts_rule():
    assert block_drafts("dflash", 8) == 7 and block_drafts("dspark", 8) == 8
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        block_drafts("dflash", 1)
