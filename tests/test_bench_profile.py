"""trtspec profile's cost table (format, planner consumption) and the predicted-versus-swept comparison."""
from __future__ import annotations

import json

import pytest

from runtime_fixtures import make_eagle3, make_model
from trtspec.bench import metrics as M
from trtspec.bench.config import parse_int_list
from trtspec.bench.profile import COST_TABLE_FORMAT, CostTable, ProfileConfig, load_cost_table, profile_pair
from trtspec.bench.sweep import (Point, SweepConfig, auto_heuristic, compare, format_table, model_throughput,
                                 run_sweep)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    target = make_model(root / "target", seed=0, init=0.3)
    draft = make_model(root / "draft", seed=1, from_model=target, noise=0.02, layers=1)
    return target, draft


@pytest.mark.parametrize("method", ["engine", "forward"])
def test_profile_table_format_and_recipes_reader(pair, tmp_path, method):
    from trtspec.recipes.calibration import load_cost_table as recipes_load

    target, draft = pair
    cfg = ProfileConfig(batch_sizes=(1, 3), tokens=(1, 4), draft_tokens=(1,), context_len=16, warmup=1, repeats=2,
                        method=method, clock="cpu" if method == "engine" else "wall")
    table = profile_pair(target, draft, cfg)
    path = table.save(tmp_path / "cost_table.json")
    data = json.loads(path.read_text())
    assert data["format"] == COST_TABLE_FORMAT == "trtspec.cost_table/v1"
    assert set(data["target"]) == {"1", "3"} and set(data["target"]["1"]) == {"1", "4"}
    assert set(data["draft"]) == {"1", "3"} and set(data["draft"]["3"]) == {"1"}
    assert all(s > 0 for row in data["target"].values() for s in row.values())
    assert data["device"].startswith("cpu") and data["source"] and data["context_len"] == 16
    assert data["method"] == method and data["clock"] == ("cpu" if method == "engine" else "wall")
    ours, theirs = load_cost_table(path), recipes_load(path)
    assert theirs.target_time(3, 4) == pytest.approx(data["target"]["3"]["4"])
    assert theirs.draft_step_time(1, 1) == pytest.approx(data["draft"]["1"]["1"])
    assert ours.target_s(2, 1) == pytest.approx((data["target"]["1"]["1"] + data["target"]["3"]["1"]) / 2)


def test_profile_times_sampled_steps_into_a_sample_section(pair, tmp_path):
    """``verify=('greedy', 'sample')``: the same grid stepped with sampled requests; the controller
    prices sampled steps from that section, the planner's reader still reads the greedy tables."""
    from trtspec.recipes.calibration import load_cost_table as recipes_load
    from trtspec.runtime.controller import StepCosts

    target, draft = pair
    cfg = ProfileConfig(batch_sizes=(1, 2), tokens=(1, 3), draft_tokens=(1,), context_len=16, warmup=1, repeats=2,
                        clock="cpu", verify=("greedy", "sample"))
    path = profile_pair(target, draft, cfg).save(tmp_path / "cost_table.json")
    data = json.loads(path.read_text())
    assert data["verify"] == ["greedy", "sample"]
    sample = data["sample"]
    assert set(sample["target"]) == {"1", "2"} and set(sample["target"]["2"]) == {"1", "3"}
    assert all(s > 0 for row in sample["target"].values() for s in row.values())
    costs = StepCosts(data)
    assert costs.priced_sampled
    assert costs.seconds("sample", 2, 3, 2) == pytest.approx(sample["target"]["2"]["3"] + 2 * sample["draft"]["2"]["1"])
    assert costs.seconds("greedy", 2, 3, 2) == pytest.approx(data["target"]["2"]["3"] + 2 * data["draft"]["2"]["1"])
    assert recipes_load(path).target_time(2, 3) == pytest.approx(data["target"]["2"]["3"])
    with pytest.raises(ValueError, match="verify=\\('sample',\\)"):
        ProfileConfig(verify=("sample",))
    with pytest.raises(ValueError, match="needs method='engine'"):
        ProfileConfig(method="forward", verify=("greedy", "sample"))


def test_profile_times_the_drafters_catch_up_per_backlog(pair, tmp_path):
    """The engine method's ``catch_up`` section: the drafter feeding B newcomers' backlogs of U tokens
    (keyed by the backlog the drafter reports), read back by the controller beyond a steady step's feed;
    a drafter that keeps no cache (n-gram) has nothing to feed and no section."""
    from trtspec.bench.profile import measure_catch_up
    from trtspec.runtime import load_pipeline
    from trtspec.runtime.controller import StepCosts

    target, draft = pair
    cfg = ProfileConfig(batch_sizes=(1, 3), tokens=(1, 2), context_len=16, warmup=1, repeats=2, clock="cpu",
                        catch_up_tokens=(2, 8, 600))
    data = json.loads(profile_pair(target, draft, cfg).save(tmp_path / "cost_table.json").read_text())
    feeds = data["catch_up"]
    assert set(feeds) == {"1", "3"} and set(feeds["3"]) == {"2", "8", "510"}   # 600 capped by the 512 context
    assert all(s > 0 for row in feeds.values() for s in row.values())
    costs = StepCosts(data)
    assert costs.catch_up(3, 2) == 0.0 and costs.catch_up(1, 1) == 0.0
    assert costs.catch_up(3, 8) == pytest.approx(max(feeds["3"]["8"] - feeds["3"]["2"], 0.0))
    ngram = load_pipeline(target, None, drafter="ngram", draft_len=2)
    assert measure_catch_up(ngram, cfg) == {}
    with pytest.raises(ValueError, match="catch_up_tokens"):
        ProfileConfig(catch_up_tokens=(0,))


def test_profile_config_and_table_errors(tmp_path):
    with pytest.raises(ValueError, match="batch_sizes"):
        ProfileConfig(batch_sizes=(0, 2))
    with pytest.raises(ValueError, match="dtype"):
        ProfileConfig(dtype="int8")
    with pytest.raises(ValueError, match="method='roofline'"):
        ProfileConfig(method="roofline")
    with pytest.raises(ValueError, match="needs a draft model"):
        profile_pair("unused", None, ProfileConfig())
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"format": COST_TABLE_FORMAT, "device": "x", "source": "s",
                               "target": {"1": {"1": -1.0}}, "draft": {"1": {"1": 1.0}}}))
    with pytest.raises(ValueError, match=r"target\[1\]\['1'\] must be a positive number"):
        load_cost_table(bad)


def test_cpu_clock_counts_this_process_only():
    import time

    from trtspec.bench.profile import clock_fn, use_clock

    now = clock_fn("cpu")
    t0 = now()
    time.sleep(0.2)  # waiting costs no CPU time
    assert now() - t0 < 0.05
    with pytest.raises(ValueError, match="only for device='cpu'"):
        use_clock("cpu", "cuda")
    with pytest.raises(ValueError, match="clock='gpu'"):
        clock_fn("gpu")


def test_fit_draft_cost_known_answer():
    from trtspec.bench.profile import fit_draft_cost

    assert fit_draft_cost([(1, 0.005), (2, 0.007), (4, 0.011)]) == pytest.approx((0.003, 0.002))
    assert fit_draft_cost([(4, 0.008)]) == pytest.approx((0.0, 0.002))
    assert fit_draft_cost([(1, 0.001), (3, 0.007)]) == pytest.approx((0.0, 0.003))  # c clipped at 0
    with pytest.raises(ValueError, match="D >= 1"):
        fit_draft_cost([(0, 0.1)])


def _table(path, slope):
    """Synthetic table: target step = 10 ms + slope * tokens, draft step 1 ms."""
    t = CostTable("synthetic", {str(b): {str(k): 0.010 + slope * k for k in range(1, 10)} for b in (1, 4)},
                  {str(b): {"1": 0.001} for b in (1, 4)}, source="synthetic for the test")
    return t.save(path)


def test_planner_consumes_calibration_and_follows_it(pair, tmp_path):
    from trtspec.recipes.api import build_request
    from trtspec.recipes.optimizer import plan

    target, draft = pair
    recs = [M.RequestRecord("a", "qa", 100, 240, (80, 64, 51, 41, 4), 0, 0.0)]
    acc = M.build_profile(recs, drafter="draft_model", draft_len=5, source="synthetic").save(tmp_path / "acc.json")
    chosen = {}
    for name, slope in (("flat", 0.0), ("steep", 0.02)):
        cal = _table(tmp_path / f"{name}.json", slope)
        req = build_request(model=str(target), gpu="h200", drafters="draft_model", acceptance=str(acc),
                            calibration=str(cal), draft_model=str(draft), batches=(1, 4), max_draft_len=5)
        rows = {r.batch: r for r in plan(req).rows}
        cost = load_cost_table(cal)
        d = rows[1].draft_len
        # the planner's step time is the table's target time plus D draft steps
        assert rows[1].verify_ms == pytest.approx(cost.target_s(1, d + 1) * 1e3, rel=1e-3)
        assert rows[1].tokens_per_s == pytest.approx(
            model_throughput(M.load_profile(acc)["rates"], _RecipesCost(cost), 1, d), rel=1e-3)
        chosen[name] = d
    assert chosen["flat"] > chosen["steep"]


class _RecipesCost:
    """Adapter: our CostTable with the recipes method names used by model_throughput."""

    def __init__(self, t):
        self.t = t

    def target_time(self, b, k):
        return self.t.target_s(b, k)

    def draft_step_time(self, b, w):
        return self.t.draft_s(b, w)


def test_compare_known_answer():
    tps = {(1, 0): 10.0, (1, 1): 15.0, (1, 3): 14.5, (1, 5): 12.0,
           (4, 0): 40.0, (4, 1): 42.0, (4, 3): 30.0, (4, 5): 20.0}
    points = [Point(b, d, 0, 1.0, v, 1.0) for (b, d), v in tps.items()]

    class Flat:
        def target_time(self, b, k):
            return 1.0

        def draft_step_time(self, b, w):
            return 0.0

    verdicts = compare(points, [0.5] * 5, Flat(), {1: {"draft_len": 3}, 4: {"draft_len": 1}})
    v1, v4 = verdicts
    assert (v1.best_d, v4.best_d) == (1, 1)
    assert v1.ratios["planner"] == pytest.approx(14.5 / 15) and v4.ratios["planner"] == 1.0
    assert v1.choices["auto"] == 5 and v1.ratios["auto"] == pytest.approx(12 / 15)
    assert v4.choices["auto"] == 5 and v4.ratios["auto"] == pytest.approx(20 / 42)
    assert v4.ratios["fixed3"] == pytest.approx(30 / 42)
    assert v1.choices["model"] == 5  # free drafts: the estimate grows with D
    assert "14.5" not in format_table(verdicts) and "0.967" in format_table(verdicts)


def test_auto_heuristic_and_int_lists():
    assert [auto_heuristic(b) for b in (1, 4, 5, 32, 33)] == [5, 5, 3, 3, 0]
    assert parse_int_list("0..3,8", "x") == (0, 1, 2, 3, 8)
    with pytest.raises(ValueError, match="--batch='1,a'"):
        parse_int_list("1,a", "--batch")


def test_run_sweep_end_to_end_on_tiny_pair(pair, tmp_path):
    from trtspec.bench.datasets import load_prompts

    target, draft = pair
    cal = _table(tmp_path / "cal.json", 0.001)
    prompts = load_prompts("builtin", categories=["coding"], limit_per_category=3)
    res = run_sweep(target, draft, prompts, SweepConfig(draft_lens=(0, 2), batch_sizes=(1, 2), repeats=1,
                                                        max_new_tokens=12),
                    out_dir=tmp_path / "out", calibration=cal)
    assert res["planner_available"] and set(res["planner_rows"]) == {"1", "2"}
    assert len(res["points"]) == 4 and all(p["tokens_per_s"] > 0 and p["steady_steps"] > 0 for p in res["points"])
    assert all(p["mean_al"] == 1.0 for p in res["points"] if p["draft_len"] == 0)
    reached = res["counts"]["2"]["reached"]
    assert 0 < len(reached) <= 2 and json.loads((tmp_path / "out" / "acceptance.json").read_text())["counts"][
        "reached"] == reached
    assert len(res["detail"].splitlines()) == 2 + 4
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["table"] == res["table"]
    assert M.load_profile(tmp_path / "out" / "acceptance.json")["draft_len"] == 2
    for v in res["verdicts"]:
        d, r = v["choices"]["planner"], v["ratios"]["planner"]
        assert 0 <= d <= 2 and ((r is None) == (d == 1)) and (r is None or 0 < r <= 1.0)


def test_sweep_needs_more_prompts_than_the_largest_batch(pair, tmp_path):
    from trtspec.bench.datasets import load_prompts

    target, draft = pair
    prompts = load_prompts("builtin", categories=["coding"], limit_per_category=2)
    with pytest.raises(ValueError, match=f"{len(prompts)} prompts x rounds cannot refill batch size 2"):
        run_sweep(target, draft, prompts, SweepConfig(draft_lens=(0, 1), batch_sizes=(1, 2), repeats=1),
                  out_dir=tmp_path / "out", calibration=_table(tmp_path / "cal.json", 0.001))


def test_run_sweep_profiles_and_plans_an_eagle3_head(pair, tmp_path):
    """The drafter reaches the sweep's engines, the profile (engine method) and the planner: an EAGLE-3
    head directory is never read as a draft model."""
    from trtspec.bench.datasets import load_prompts

    target, _ = pair
    head = make_eagle3(tmp_path / "eagle", target, seed=4, echo=True)
    prompts = load_prompts("builtin", categories=["coding"], limit_per_category=2)
    res = run_sweep(target, head, prompts, SweepConfig(draft_lens=(0, 2), batch_sizes=(1,), repeats=1,
                                                      max_new_tokens=8, clock="cpu"),
                    out_dir=tmp_path / "out", drafter="eagle3")
    assert json.loads((tmp_path / "out" / "acceptance.json").read_text())["drafter"] == "eagle3"
    table = json.loads((tmp_path / "out" / "cost_table.json").read_text())
    assert table["method"] == "engine" and set(table["draft"]) == {"1"}
    assert res["planner_available"] and 0 <= res["verdicts"][0]["choices"]["planner"] <= 2
