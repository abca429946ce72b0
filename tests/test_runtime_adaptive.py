"""Adaptive speculation in the runtime engine: per-step depths from the controller, outputs unchanged."""
from __future__ import annotations

import itertools

import pytest

from runtime_fixtures import make_eagle3, make_model, single_thread  # noqa: F401
from trtspec.runtime import load_pipeline
from trtspec.runtime.controller import AdaptiveConfig, StepCosts
from trtspec.runtime.params import SamplingParams
from trtspec.runtime.stats import SpecStats

PROMPTS = [[5, 6, 7, 5, 6], [9], [1, 2, 3, 1, 2, 3, 1], [200, 100] * 4, [42] * 3, [17, 18]]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    t = make_model(root / "target", seed=1, init=0.1, tie=True, max_pos=96)
    return {"target": t, "draft": make_model(root / "draft", seed=3, from_model=t, noise=0.03, max_pos=96),
            "eagle": make_eagle3(root / "eagle", t, seed=4)}


def costs(draft_s=0.28, batches=(1, 8), tokens=range(1, 17), clock=None):
    """10 + 2 (T - 1) per request and step, ``draft_s`` per request and draft step: D = 2 and 3
    near a tie at a_k = 0.7, so the depth moves as acceptance does. ``clock``: stamp the table as
    measured on it, so that the engine's own step times re-price greedy steps."""
    target = {str(b): {str(t): b * (10.0 + 2.0 * (t - 1)) for t in tokens} for b in batches}
    doc = {"format": "trtspec.cost_table/v1", "device": "synthetic", "target": target,
           "draft": {str(b): {"1": b * draft_s} for b in batches}}
    return StepCosts({**doc, "clock": clock} if clock else doc)


def lively(**kw):
    """No hysteresis and no dwell: the depth changes as often as the estimates say (the hardest case)."""
    return AdaptiveConfig(costs(**kw), prior=(0.7,), hysteresis=0.0, min_dwell=0, ema=0.3)


def run(pipe, order, rows, params_of, seed=99):
    eng = pipe.engine(max_batch_size=rows, seed=seed)
    for i in order:
        eng.add_request(i, PROMPTS[i], params_of(i))
    out = {i: [] for i in order}
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return out, eng


@pytest.mark.parametrize("drafter, tree", [("draft_model", None), ("draft_model", "topk=2,depth=3"),
                                           ("eagle3", None), ("ngram", None)])
def test_adaptive_greedy_output_equals_the_targets_token_for_token(dirs, drafter, tree):
    draft = {"draft_model": dirs["draft"], "eagle3": dirs["eagle"], "ngram": None}[drafter]
    pipe = load_pipeline(dirs["target"], draft, drafter=drafter, draft_len=6, tree=tree, speculation="adaptive",
                         adaptive=lively())
    params = lambda i: SamplingParams(max_new_tokens=24 + 3 * i)  # noqa: E731
    got, eng = run(pipe, range(len(PROMPTS)), 3, params)
    plain, _ = run(pipe.without_speculation(), range(len(PROMPTS)), 3, params)
    assert got == plain
    counts = eng.stats.draft_len_counts
    if drafter != "ngram":   # the controller used several depths, and counted them
        assert sum(c > 0 for c in counts) >= 2, counts
    assert sum(counts) == eng.stats.steps and eng.controller.steps == eng.step_count


@pytest.mark.parametrize("verify, tree, clock", [("sample", None, None), ("sample", "topk=2,depth=2", None),
                                                 ("block", None, None), ("sample", None, "wall")])
def test_adaptive_seeded_samples_are_the_same_at_any_batch_placement(dirs, verify, tree, clock):
    """Also with a table stamped with its clock: sampled steps are priced from the table alone, never
    from timing (the depths decide which tokens rejection sampling draws)."""
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, tree=tree, verify=verify,
                         speculation="adaptive", adaptive=lively(clock=clock))
    params = lambda i: SamplingParams(max_new_tokens=12 + 2 * i, temperature=0.9, top_k=40, seed=1000 + i)  # noqa: E731
    first, eng = run(pipe, range(5), 5, params)
    assert sum(c > 0 for c in eng.stats.draft_len_counts) >= 2
    assert (eng.controller.clock is not None) == bool(clock) and not (clock and eng.controller.served.running)
    for order in itertools.islice(itertools.permutations(range(5)), 1, 60, 13):   # other rows, other batch order
        assert run(pipe, order, 5, params)[0] == first, order
    assert run(pipe, range(5), 6, params)[0] == first                             # a larger cache, spare rows


def test_greedy_steps_are_repriced_from_the_engines_own_step_times(dirs):
    """A table stamped with its clock: the engine times its greedy steps on it and the controller
    learns each depth's factor to the table (synthetic seconds: far below 1); outputs stay the target's."""
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, speculation="adaptive",
                         adaptive=lively(clock="wall"))
    params = lambda i: SamplingParams(max_new_tokens=20)  # noqa: E731
    got, eng = run(pipe, range(4), 4, params)
    assert got == run(pipe.without_speculation(), range(4), 4, params)[0]
    served = eng.controller.served
    measured = [k for k in served.running if k[1] == 3]       # 4 requests' steps, at the depths served
    assert measured and all(0 < served.running[k] < 0.01 for k in measured)   # seconds here against the table's >= 10


def test_an_adaptive_engine_feeds_a_newcomers_prompt_to_the_drafter_in_the_first_step_that_drafts(dirs):
    """A static engine feeds the drafter at admission; an adaptive one leaves the prompt in the drafter's
    backlog (what the controller prices as the catch-up) until a step drafts, inside the step."""
    prompt = PROMPTS[0]
    static = load_pipeline(dirs["target"], dirs["draft"], draft_len=4).engine(max_batch_size=2)
    static.add_request("a", prompt, SamplingParams(max_new_tokens=8))
    static.admit()
    assert static.drafter.backlog(static.running[0]) == 1   # the root only: fed with the first proposal
    for c in (lively(), lively(clock="cpu")):
        eng = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, speculation="adaptive",
                            adaptive=c).engine(max_batch_size=2)
        eng.add_request("a", prompt, SamplingParams(max_new_tokens=8))
        eng.admit()
        r = eng.running[0]
        assert eng.drafter.backlog(r) == len(prompt) and eng.drafter.seen[r.row] == 0
        eng.step()
        assert eng.stats.drafts == 1 and eng.drafter.backlog(r) <= 2
    idle = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, speculation="adaptive",
                         adaptive=AdaptiveConfig(costs(draft_s=500.0), prior=(0.9,))).engine(max_batch_size=2)
    idle.add_request("a", prompt, SamplingParams(max_new_tokens=8))
    for _ in range(3):
        idle.step()
    r = idle.running[0]
    assert idle.stats.drafts == 0 and idle.drafter.backlog(r) == len(r.tokens)   # nothing fed while idle


def test_the_engine_learns_how_often_a_finished_requests_slot_stays_empty(dirs):
    """Three requests for two rows: when "a" finishes, "c" waits and takes its row in the next step (its
    slot did not stay empty); when the next one finishes nothing waits (it did): the share is 1 / 2."""
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, speculation="adaptive", adaptive=lively())
    eng = pipe.engine(max_batch_size=2)
    for rid, n in (("a", 2), ("b", 12), ("c", 30)):
        eng.add_request(rid, PROMPTS[len(rid) % len(PROMPTS)], SamplingParams(max_new_tokens=n))
    done = []
    while eng.has_work():
        done += [o.request_id for o in eng.step() if o.finished]
    assert done == ["a", "b", "c"]
    assert eng.controller._vacancy == [0.5, 2] and eng.controller.vacancy == 0.5


def test_drafting_priced_out_drafts_nothing(dirs):
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=4, speculation="adaptive",
                         adaptive=AdaptiveConfig(costs(draft_s=500.0), prior=(0.9,)))
    got, eng = run(pipe, range(4), 4, lambda i: SamplingParams(max_new_tokens=10))
    plain, _ = run(pipe.without_speculation(), range(4), 4, lambda i: SamplingParams(max_new_tokens=10))
    assert got == plain
    assert eng.stats.drafts == 0 and eng.stats.draft_len_counts == [eng.stats.steps]


def test_adaptive_needs_step_costs(dirs):
    with pytest.raises(ValueError, match="speculation='adaptive' needs adaptive=AdaptiveConfig"):
        load_pipeline(dirs["target"], dirs["draft"], speculation="adaptive")
    with pytest.raises(ValueError, match="speculation must be one of"):
        load_pipeline(dirs["target"], dirs["draft"], speculation="dynamic")
    pipe = load_pipeline(dirs["target"], dirs["draft"], draft_len=2)
    assert pipe.engine().controller is None
    view = pipe.with_speculation("adaptive", lively())
    assert view.target is pipe.target and view.engine().controller is not None
    assert view.without_speculation().spec.speculation == "static"


def test_stats_count_draft_lengths_per_step():
    a, b = SpecStats(), SpecStats()
    for d, acc in ((3, 1), (0, 0), (3, 3), (1, 0)):
        a.record_step(d, acc, acc + 1)
    b.record_step(5, 2, 3)
    assert a.draft_len_counts == [1, 1, 0, 2]
    assert a.merge(b).draft_len_counts == [1, 1, 0, 2, 0, 1]
    assert a.to_dict()["draft_len_counts"] == [1, 1, 0, 2, 0, 1]
