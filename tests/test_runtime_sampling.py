"""Speculative sampling is lossless: the joint law of the first generated tokens equals the target's.

On a vocabulary of 8 the exact target-only law of the first two tokens is computed from the model
(P(x1) P(x2 | x1), after the same temperature / top-k / top-p); many rows of one batch, each with
its own random stream, sample it with speculation (4 new tokens, so drafts of depth up to 3 are
verified), and a chi-square test compares the counts with the exact law (fixed seeds).
"""
from __future__ import annotations

import pytest
import torch

from runtime_fixtures import full_logits, make_eagle3, make_model, single_thread  # noqa: F401
from trtspec.runtime.drafters.draft_model import DraftModelDrafter
from trtspec.runtime.drafters.eagle3 import Eagle3Drafter
from trtspec.runtime.drafters.ngram import NgramDrafter
from trtspec.runtime.engine import Engine
from trtspec.runtime.models import load_eagle3, load_model
from trtspec.runtime.params import SamplingParams, SpecConfig, TreeShape
from trtspec.runtime.sampling import probs

scipy_stats = pytest.importorskip("scipy.stats")

V, ROWS, PROMPT = 8, 3000, [3, 1, 3, 1, 3]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("v8")
    t = make_model(root / "t", seed=11, vocab=V, hidden=32, heads=2, kv_heads=1, init=0.5)
    target = load_model(t)
    return {
        "target": target,
        "draft": load_model(make_model(root / "d", seed=12, vocab=V, hidden=32, heads=2, kv_heads=1, init=0.5)),
        "eagle": load_eagle3(make_eagle3(root / "e", t, seed=13, draft_vocab=6, init=0.3), target),
    }


def exact_joint(model, params: SamplingParams) -> torch.Tensor:
    """float64 ``[V, V]``: P(x1, x2) of target-only sampling after PROMPT."""
    p1 = probs(full_logits(model, PROMPT)[-1], *params.transform).double()
    rows = [probs(full_logits(model, PROMPT + [x])[-1], *params.transform).double() for x in range(V)]
    return p1[:, None] * torch.stack(rows)


def sample_joint(target, drafter, spec, params) -> torch.Tensor:
    """int64 ``[V, V]`` counts of (x1, x2) over ROWS requests decoded together."""
    eng = Engine(target, drafter, spec, max_batch_size=ROWS, max_seq_len=len(PROMPT) + params.max_new_tokens)
    for i in range(ROWS):
        eng.add_request(i, PROMPT, params)
    out = {}
    while eng.has_work():
        for o in eng.step():
            out.setdefault(o.request_id, []).extend(o.new_token_ids)
    counts = torch.zeros(V, V, dtype=torch.int64)
    for toks in out.values():
        counts[toks[0], toks[1]] += 1
    assert eng.stats.draft_tokens > 0
    return counts, eng.stats


def chi_square_pvalue(counts: torch.Tensor, expected_p: torch.Tensor) -> float:
    """Pearson chi-square p-value; cells expecting < 5 counts are pooled into one cell. A cell of
    probability 0 must never be observed."""
    assert int(counts[expected_p == 0].sum()) == 0, "sampled a pair the target cannot produce"
    expected_p = torch.where(expected_p == 0, torch.nan, expected_p)
    counts = counts[~expected_p.isnan()]
    expected_p = expected_p[~expected_p.isnan()]
    n = int(counts.sum())
    exp = (expected_p.flatten() / expected_p.sum() * n).numpy()
    obs = counts.flatten().double().numpy()
    small = exp < 5
    obs_m = list(obs[~small]) + ([obs[small].sum()] if small.any() else [])
    exp_m = list(exp[~small]) + ([exp[small].sum()] if small.any() else [])
    return float(scipy_stats.chisquare(obs_m, exp_m).pvalue)


CASES = {
    "sample-chain": ("draft", dict(draft_len=3, verify="sample"), {}),
    "block-chain": ("draft", dict(draft_len=3, verify="block"), {}),
    "sample-tree-iid": ("draft", dict(tree=TreeShape(2, 3), verify="sample"), {}),
    "sample-tree-gumbel": ("draft", dict(tree=TreeShape(2, 3), verify="sample", siblings_without_replacement=True), {}),
    "sample-chain-topk-topp": ("draft", dict(draft_len=3, verify="sample"), dict(temperature=0.8, top_k=5, top_p=0.9)),
    "block-chain-topk-topp": ("draft", dict(draft_len=3, verify="block"), dict(temperature=0.8, top_k=5, top_p=0.9)),
    "ngram-sample": ("ngram", dict(draft_len=3, verify="sample"), {}),
    "ngram-block": ("ngram", dict(draft_len=3, verify="block"), {}),
    "eagle3-sample-tree": ("eagle", dict(tree=TreeShape(2, 2), verify="sample"), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_sampling_approximates_target_distribution(models, case):
    kind, spec_kw, sampling_kw = CASES[case]
    params = SamplingParams(max_new_tokens=4, **{"temperature": 1.0, **sampling_kw})
    drafter = {"draft": lambda: DraftModelDrafter(models["draft"]), "ngram": NgramDrafter,
               "eagle": lambda: Eagle3Drafter(models["eagle"], models["target"])}[kind]()
    counts, stats = sample_joint(models["target"], drafter, SpecConfig(seed=5, **spec_kw), params)
    assert stats.accepted_tokens > 0
    assert chi_square_pvalue(counts, exact_joint(models["target"], params)) > 1e-3


def test_chi_square_detects_the_draft_distribution(models):
    """Power check: the same samples are far from the *draft's* law (the models differ)."""
    params = SamplingParams(max_new_tokens=4, temperature=1.0)
    counts, _ = sample_joint(models["target"], DraftModelDrafter(models["draft"]),
                             SpecConfig(seed=5, draft_len=3, verify="sample"), params)
    assert chi_square_pvalue(counts, exact_joint(models["draft"], params)) < 1e-6


def test_sampling_is_reproducible_and_seed_dependent(models):
    params = SamplingParams(max_new_tokens=6, temperature=1.0)

    def run(seed):
        eng = Engine(models["target"], DraftModelDrafter(models["draft"]),
                     SpecConfig(seed=seed, draft_len=3, verify="sample"), max_batch_size=4)
        for i in range(4):
            eng.add_request(i, PROMPT, params)
        out = {i: [] for i in range(4)}
        while eng.has_work():
            for o in eng.step():
                out[o.request_id] += o.new_token_ids
        return out

    assert run(1) == run(1)
    assert run(1) != run(2)
