"""Per-request random streams in the runtime: a sampled request with a seed generates the same
tokens alone and among other requests (any position, neighbours joining and leaving), for
chain, tree and block verification; two seeds differ; unseeded requests get distinct streams."""
from __future__ import annotations

import pytest

from runtime_fixtures import make_model, single_thread  # noqa: F401
from trtspec.runtime import load_pipeline
from trtspec.runtime.params import SamplingParams

ME = [5, 6, 7, 5, 6]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    t = make_model(root / "target", seed=1, init=0.1, tie=True, max_pos=64)
    return {"target": t, "draft": make_model(root / "draft", seed=3, from_model=t, noise=0.03, max_pos=64)}


def _run(pipe, joins, rows):
    """joins: step -> [(request_id, prompt, SamplingParams)]; returns request_id -> tokens."""
    eng = pipe.engine(max_batch_size=rows, seed=99)
    out, step = {}, 0
    while step in joins or eng.has_work():
        for rid, prompt, params in joins.get(step, []):
            eng.add_request(rid, prompt, params)
            out[rid] = []
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
        step += 1
    return out


@pytest.mark.parametrize("verify, tree", [("sample", None), ("sample", "topk=2,depth=2"), ("block", None)])
def test_a_seeded_request_samples_the_same_tokens_alone_and_among_others(dirs, verify, tree):
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=3, tree=tree, verify=verify)
    me = SamplingParams(max_new_tokens=14, temperature=1.0, seed=1234)
    alone = _run(pipe, {0: [("me", ME, me)]}, 1)["me"]
    other = lambda s, n=9: SamplingParams(max_new_tokens=n, temperature=0.9, top_k=50, seed=s)  # noqa: E731
    crowds = [
        {0: [("a", [1, 2], other(1)), ("me", ME, me), ("b", [9] * 6, other(2, 4))]},          # in the middle
        {0: [("a", [3], other(3, 3))], 1: [("b", [4, 4], other(4)), ("me", ME, me)],          # joins later,
         2: [("c", [200, 100] * 3, SamplingParams(max_new_tokens=5))]},                       # a greedy neighbour
        {0: [("me", ME, me)] + [(f"n{i}", [i + 1] * (i + 1), other(10 + i)) for i in range(5)]},  # first of six
    ]
    for joins in crowds:
        assert _run(pipe, joins, 6)["me"] == alone
    changed = SamplingParams(max_new_tokens=14, temperature=1.0, seed=1235)
    assert _run(pipe, {0: [("me", ME, changed)]}, 1)["me"] != alone


def test_unseeded_requests_draw_from_distinct_streams(dirs):
    """Without a seed, the k-th request added gets its own stream (engine seed, k): identical
    prompts sample different tokens, and the run is reproducible."""
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=3, verify="sample")
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    joins = {0: [(i, ME, params) for i in range(4)]}
    first, again = _run(pipe, joins, 4), _run(pipe, joins, 4)
    assert first == again
    assert len({tuple(v) for v in first.values()}) == 4


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, True])
def test_sampling_params_seed_is_checked(seed):
    with pytest.raises(ValueError, match=r"seed must be None or an int in \[0, 2\*\*64\)"):
        SamplingParams(seed=seed)
