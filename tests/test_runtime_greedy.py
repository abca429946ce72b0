"""Greedy speculative decoding is token-for-token identical to target-only greedy decoding."""
from __future__ import annotations

import pytest
import torch

from runtime_fixtures import make_eagle3, make_model, ragged_prompts, single_thread  # noqa: F401
from trtspec.runtime.drafters.draft_model import DraftModelDrafter
from trtspec.runtime.drafters.eagle3 import Eagle3Drafter
from trtspec.runtime.drafters.ngram import NgramDrafter
from trtspec.runtime.engine import Engine
from trtspec.runtime.models import load_eagle3, load_model
from trtspec.runtime.params import SamplingParams, SpecConfig, TreeShape

NEW_TOKENS = 14


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request, tmp_path_factory):
    """A tiny target (tied embeddings, repetitive enough that drafts get accepted) and its drafters."""
    root = tmp_path_factory.mktemp(request.param)
    t = make_model(root / "target", arch=request.param, seed=1, init=0.1, tie=True)
    target = load_model(t)
    return {
        "target": target,
        "random_draft": load_model(make_model(root / "random", arch=request.param, seed=2, init=0.1)),
        "close_draft": load_model(make_model(root / "close", arch=request.param, seed=3, from_model=t, noise=0.03)),
        "eagle_random": load_eagle3(make_eagle3(root / "eagle_r", t, seed=4, draft_vocab=200), target),
        "eagle_echo": load_eagle3(make_eagle3(root / "eagle_e", t, seed=5, echo=True), target),
    }


def run(target, drafter, spec, prompts, max_new_tokens=NEW_TOKENS):
    """Generate for all prompts in one batch; returns (outputs per prompt, aggregate stats)."""
    eng = Engine(target, drafter, spec, max_batch_size=len(prompts))
    for i, p in enumerate(prompts):
        eng.add_request(i, p, SamplingParams(max_new_tokens=max_new_tokens))
    out = {i: [] for i in range(len(prompts))}
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return [out[i] for i in range(len(prompts))], eng.stats


_baseline: dict = {}


def baseline(pair, prompts):
    key = (id(pair["target"]), str(prompts))
    if key not in _baseline:
        _baseline[key] = run(pair["target"], NgramDrafter(), SpecConfig(draft_len=0), prompts)[0]
    return _baseline[key]


def make_drafter(pair, kind):
    if kind == "ngram":
        return NgramDrafter()
    if kind.startswith("eagle"):
        return Eagle3Drafter(pair[kind], pair["target"])
    return DraftModelDrafter(pair[kind])


DRAFTERS = ["random_draft", "close_draft", "ngram", "eagle_random", "eagle_echo"]


@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("D", [0, 1, 4, 7])
@pytest.mark.parametrize("kind", DRAFTERS)
def test_chain_matches_target_greedy(pair, kind, D, B):
    prompts = ragged_prompts(B, seed=B)
    out, stats = run(pair["target"], make_drafter(pair, kind), SpecConfig(draft_len=D), prompts)
    assert out == baseline(pair, prompts)
    assert all(len(o) == NEW_TOKENS for o in out)
    if D == 0:
        assert stats.draft_tokens == 0 and stats.mean_al == 1.0
    elif kind in ("close_draft", "eagle_echo", "ngram"):
        assert stats.accepted_tokens > 0, "these drafters must get some drafts accepted"


@pytest.mark.parametrize("B", [1, 5])
@pytest.mark.parametrize("shape", [(2, 1), (2, 3), (3, 4)])
@pytest.mark.parametrize("kind", ["random_draft", "close_draft", "eagle_random", "eagle_echo"])
def test_tree_matches_target_greedy(pair, kind, shape, B):
    prompts = ragged_prompts(B, seed=10 + B)
    spec = SpecConfig(tree=TreeShape(*shape))
    out, stats = run(pair["target"], make_drafter(pair, kind), spec, prompts)
    assert out == baseline(pair, prompts)
    if kind == "close_draft":
        assert stats.accepted_tokens > 0


def test_tree_accepts_more_than_chain(pair):
    """A wider tree over the same draft model accepts at least as many tokens per step on average."""
    prompts = ragged_prompts(5, seed=7)
    d = DraftModelDrafter(pair["random_draft"])
    _, chain = run(pair["target"], d, SpecConfig(draft_len=3), prompts, max_new_tokens=24)
    _, tree = run(pair["target"], d, SpecConfig(tree=TreeShape(4, 3)), prompts, max_new_tokens=24)
    assert tree.mean_al >= chain.mean_al


def test_draft_len_schedule_follows_batch_size(pair):
    """TensorRT-LLM semantics: {1: 4, 3: 2} -> B=1: D=4, B=2..3: D=2, B>3: D=0 (plain decoding)."""
    spec = SpecConfig(draft_len=4, draft_len_schedule={1: 4, 3: 2})
    assert [spec.depth_for_batch(b) for b in (1, 2, 3, 4, 16)] == [4, 2, 2, 0, 0]
    for B, per_step in ((1, 4), (3, 2), (5, 0)):
        prompts = ragged_prompts(B, seed=20 + B, lo=4)
        out, stats = run(pair["target"], DraftModelDrafter(pair["close_draft"]), spec, prompts)
        assert out == baseline(pair, prompts)
        assert stats.draft_tokens <= per_step * stats.steps * B
        if per_step == 0:
            assert stats.draft_tokens == 0


def test_eagle3_cache_matches_fresh_prefill(pair):
    """After several speculative steps, the head's prediction for the next root equals the one of a
    fresh head that prefills the whole committed text at once."""
    target, head = pair["target"], pair["eagle_random"]
    eng = Engine(target, Eagle3Drafter(head, target), SpecConfig(tree=TreeShape(2, 3)), max_batch_size=2)
    for i, p in enumerate(ragged_prompts(2, seed=3, lo=5)):
        eng.add_request(i, p, SamplingParams(max_new_tokens=40))
    for _ in range(5):
        eng.step()
    reqs = list(eng.running)
    logits_inc, _, _ = eng.drafter.catch_up(reqs)

    fresh = Engine(target, Eagle3Drafter(head, target), SpecConfig(draft_len=1), max_batch_size=2)
    for r in reqs:
        fresh.add_request(r.request_id, r.tokens, SamplingParams(max_new_tokens=1))
    fresh._admit()
    logits_fresh, _, _ = fresh.drafter.catch_up(fresh.running)
    torch.testing.assert_close(logits_inc, logits_fresh, atol=1e-4, rtol=1e-4)
