"""The ``mtp`` drafter: the MTP layer equals the training module, its proposals equal a step-by-step
reference, and speculative output through it equals the target alone (greedy) or repeats (sampled)."""
from __future__ import annotations

import pytest
import torch

from deepseek_fixtures import hf_models, make_deepseek
from runtime_fixtures import make_model, single_thread  # noqa: F401  (autouse: one thread)
from trtspec.runtime import load_pipeline, masks
from trtspec.runtime.config import ModelFormatError
from trtspec.runtime.params import SamplingParams

SEED = 6


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return make_deepseek(tmp_path_factory.mktemp("mtp") / "ds", seed=SEED)


@pytest.fixture(scope="module")
def hf():
    return hf_models(SEED)


def reference_drafts(model, mtp, tokens: list[int], D: int) -> list[int]:
    """Greedy drafts recomputed from scratch with the Hugging Face target and the training MTP module: entries
    ``(h_t, x_{t+1})`` for the committed tokens, then each draft appended with the module's last output."""
    n = len(tokens) - 1
    with torch.no_grad():
        h = model.model(input_ids=torch.tensor([tokens[:n]])).last_hidden_state[0]
        states, toks, drafts = list(h), list(tokens[1:]), []
        for _ in range(D):
            emb = model.model.embed_tokens(torch.tensor([toks]))
            pe = model.model.rotary_emb(emb, torch.arange(len(toks))[None])
            g = mtp(torch.stack(states)[None], emb, pe)[0, -1]
            d = int(model.lm_head(g).argmax())
            drafts.append(d)
            states.append(g)
            toks.append(d)
    return drafts


def test_mtp_layer_equals_the_training_module(ds, hf):
    """Teacher-forced over 12 entries, the runtime's MTP layer (latent cache, absorbed MLA, its MoE) gives the
    training module's outputs and logits: the checkpoint names and the maths agree."""
    from trtspec.runtime.deepseek import load_mtp
    from trtspec.runtime.models import load_model

    model, mtp = hf
    target = load_model(ds)
    layer = load_mtp(ds, target)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (2, 13), generator=g)
    with torch.no_grad():
        h = model.model(input_ids=x[:, :12]).last_hidden_state
        emb = model.model.embed_tokens(x[:, 1:])
        ref_g = mtp(h, emb, model.model.rotary_emb(emb, torch.arange(12)[None]))
        pos, wi, mask = masks.chain_block(torch.zeros(2, dtype=torch.long), torch.full((2,), 12), 12, 16)
        got_g, logits = layer(x[:, 1:], h, pos, layer.new_cache(2, 16), torch.arange(2), wi, mask)
    torch.testing.assert_close(got_g, ref_g, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, model.lm_head(ref_g), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("D", [1, 3])
def test_mtp_proposals_equal_step_by_step_reference(ds, hf, D):
    """Every greedy chain the drafter proposes, step after step for 3 requests of awkward prompt lengths,
    equals the drafts recomputed from scratch (no cache) for the tokens committed at that step."""
    model, mtp = hf
    pipe = load_pipeline(ds, drafter="mtp", draft_len=D)
    eng = pipe.engine(max_batch_size=3)
    seen = []
    inner = eng.drafter.propose

    def spy(reqs, depths, branching, mode):
        prop = inner(reqs, depths, branching, mode)
        seen.append([(list(r.tokens), d, prop.tokens[i, 1:d + 1].tolist()) for i, (r, d) in enumerate(zip(reqs, depths))])
        return prop

    eng.drafter.propose = spy
    g = torch.Generator().manual_seed(2)
    for i, n in enumerate((2, 5, 11)):
        eng.add_request(i, torch.randint(1, 256, (n,), generator=g).tolist(), SamplingParams(max_new_tokens=12))
    while eng.has_work():
        eng.step()
    checked = 0
    for step in seen:
        for tokens, depth, drafts in step:
            assert drafts == reference_drafts(model, mtp, tokens, depth), f"after {tokens}"
            checked += depth > 0
    assert checked >= 10


@pytest.mark.parametrize("spec", [dict(draft_len=1), dict(draft_len=4), dict(tree="topk=2,depth=3"),
                                  dict(draft_len=3, verify="block"), dict(draft_len=2, verify="sample")])
def test_mtp_greedy_output_equals_target_alone(ds, spec):
    prompts = [[7], [3, 9, 27, 81], list(range(40, 51))]
    base = load_pipeline(ds, drafter="mtp", draft_len=0).generate_ids(prompts, max_new_tokens=16)
    pipe = load_pipeline(ds, drafter="mtp", **spec)
    got = pipe.generate_ids(prompts, max_new_tokens=16)
    assert [t for t, _ in got] == [t for t, _ in base]
    assert pipe.last_stats.draft_tokens > 0


def test_mtp_sampled_output_repeats_and_ignores_batch_position(ds):
    pipe = load_pipeline(ds, drafter="mtp", draft_len=3, verify="sample")
    prompts = [[5, 6, 7], [100, 101], [9] * 6]
    a = pipe.generate_ids(prompts, max_new_tokens=14, temperature=0.9, seed=11)
    b = pipe.generate_ids(prompts, max_new_tokens=14, temperature=0.9, seed=11)
    assert [t for t, _ in a] == [t for t, _ in b]
    c = pipe.generate_ids(prompts, max_new_tokens=14, temperature=0.9, seed=12)
    assert [t for t, _ in a] != [t for t, _ in c]
    eng = pipe.engine(max_batch_size=3)
    alone = pipe.engine(max_batch_size=1)
    params = SamplingParams(max_new_tokens=14, temperature=0.9, seed=99)
    for e, ids in ((eng, (0, 1, 2)), (alone, (1,))):
        for i in ids:
            e.add_request(i, prompts[i], params)
    outs = {}
    for e, key in ((eng, "batch"), (alone, "alone")):
        got = {}
        while e.has_work():
            for o in e.step():
                got[o.request_id] = got.get(o.request_id, []) + o.new_token_ids
        outs[key] = got[1]
    assert outs["batch"] == outs["alone"]


def test_mtp_drafter_refuses_a_target_without_mtp_layers_and_a_draft(tmp_path, ds):
    llama = make_model(tmp_path / "llama")
    with pytest.raises(ModelFormatError, match="no MTP layers"):
        load_pipeline(llama, drafter="mtp", draft_len=2)
    with pytest.raises(ValueError, match="reads the MTP layer from the target"):
        load_pipeline(ds, ds, drafter="mtp", draft_len=2)


def test_mtp_newcomer_with_a_long_prompt_joins_a_deep_batch(ds):
    """A refilled row's prompt is fed to the MTP layer at admission, so the next step's catch-up never pads a deep
    request to the newcomer's prompt length (that width would run past the cache)."""
    pipe = load_pipeline(ds, drafter="mtp", draft_len=3)
    base = load_pipeline(ds, drafter="mtp", draft_len=0)
    prompts = {"deep": [3, 9, 27], "short": [5, 6], "long": list(range(50, 95))}
    budget = {"deep": 40, "short": 24, "long": 8}
    eng = pipe.engine(max_batch_size=2, max_seq_len=60)
    for rid in ("deep", "short", "long"):
        eng.add_request(rid, prompts[rid], SamplingParams(max_new_tokens=budget[rid]))
    got: dict[str, list[int]] = {}
    while eng.has_work():
        for o in eng.step():
            got[o.request_id] = got.get(o.request_id, []) + o.new_token_ids
    for rid, prompt in prompts.items():
        assert got[rid] == base.generate_ids([prompt], max_new_tokens=budget[rid])[0][0], rid
