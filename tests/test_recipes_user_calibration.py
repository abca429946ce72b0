"""`trtspec calibrate`: a deployment's engine figures fitted to its own points, and plan / build using them.

The synthetic deployment's points come from the planner itself with known, perturbed engine figures (plus a fixed-
seed noise): the fit must recover them and cut the error on points it did not see."""
from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from trtspec.cli import main
from trtspec.recipes.engines import load_engine
from trtspec.recipes.user_calibration import (COLUMNS, FORMAT, CalibrationInputError, Deployment, MeasuredPoint,
                                              Setup, read_calibration, read_inputs)
from trtspec.recipes.user_fit import FitSettings, calibrate, fit, observations, predict

SETUP = dict(model="llama-3.1-8b", gpu="h100", engine="vllm", drafter="eagle3", context=2048)
RATE = 0.72  # per-position acceptance of the synthetic drafter: AL(D) = 1 + sum_k RATE^k


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def al(d: int) -> float:
    return 1.0 + sum(RATE ** k for k in range(1, d + 1))


@pytest.fixture(scope="module")
def truth():
    prior = load_engine("vllm")
    us = prior.params_us()
    return prior.with_params(kernel_scale=1.12, step_us=1.6 * us["step_us"], spec_layer_us=0.6 * us["spec_layer_us"],
                             draft_forward_us=1.8 * us["draft_forward_us"], verify_split=0.6)


def synthetic(truth, grid, seed=0, noise=0.01) -> Deployment:
    """Points priced by the planner with the ``truth`` engine figures, times log-normal noise (fixed seed)."""
    from trtspec.recipes.optimizer import request_pricer
    from trtspec.recipes.pricing import Pricer

    setup = Setup.from_fields(SETUP)
    exact = Deployment(setup, tuple(MeasuredPoint(b, d, al(d), 1.0) for b, d in grid))
    rng = np.random.default_rng(seed)
    points = []
    for o, p in zip(observations(exact), exact.points):
        base = request_pricer(o.case.request)
        value = predict(o, Pricer(base.gpu, truth, base.db, base.note)) * math.exp(rng.normal(0.0, noise))
        points.append(MeasuredPoint(p.batch, p.draft_len, p.al, value, where=f"B={p.batch} D={p.draft_len}"))
    return Deployment(setup, tuple(points))


def test_synthetic_deployment_recovers_its_figures_and_cuts_the_heldout_error(truth):
    seen = synthetic(truth, [(b, d) for b in (1, 8, 64) for d in (0, 2, 5)])
    unseen = synthetic(truth, [(b, d) for b in (2, 4, 16, 32) for d in (1, 3, 4)], seed=1)
    prior = load_engine("vllm")
    res = fit(observations(seen), prior, "sequential", FitSettings(noise_sd=0.01))  # the generator's noise
    assert res.summary["converged"]
    p = res.parameters
    assert p["kernel_scale"]["value"] == pytest.approx(1.12, rel=0.04)
    assert p["step_us"]["value"] == pytest.approx(truth.params_us()["step_us"], rel=0.15)
    true = {**truth.params_us(), "kernel_scale": truth.kernel_scale, "verify_split": truth.verify_split}
    spec_fixed = {k for k in ("spec_step_us", "spec_layer_us", "spec_request_us") if prior.params_us()[k] > 0}
    assert {k for k, v in p.items() if v["fitted"]} == {"kernel_scale", "step_us", "draft_forward_us",
                                                         "verify_split"} | spec_fixed  # the corpus's non-zero ones
    for name in (k for k, v in p.items() if v["fitted"]):
        assert abs(p[name]["value"] - true[name]) < 3 * p[name]["sd"], name  # the truth within 3 sd
    held = observations(unseen)
    from trtspec.recipes.optimizer import request_pricer
    from trtspec.recipes.pricing import Pricer

    def med(profile):
        errs = []
        for o in held:
            b = request_pricer(o.case.request)
            errs.append(abs(predict(o, Pricer(b.gpu, profile, b.db, b.note)) / o.value - 1.0))
        return statistics.median(errs)

    before, after = med(prior), med(res.profile)
    assert after < 0.02 and after < before / 4, (before, after)


def test_two_points_move_the_figures_only_as_far_as_the_prior_allows(truth):
    two = synthetic(truth, [(1, 0), (16, 3)])
    res = fit(observations(two), load_engine("vllm"), "sequential")
    assert res.summary["median_abs_error_after"] < res.summary["median_abs_error_before"]
    held = [p for p in res.parameters.values() if not p["fitted"]]
    assert held and all(p["value"] == p["prior"] and p["sd"] == 0.0 for p in held)
    # an under-determined figure keeps most of its prior width
    assert res.parameters["draft_forward_us"]["sd"] > 0.3 * res.parameters["draft_forward_us"]["value"]


def write_points(path, points, setup=SETUP):
    path.write_text(yaml.safe_dump({"setup": setup, "points": points}))
    return path


POINTS = [{"batch": 1, "draft_len": 0, "al": 1, "tokens_per_s": 150},
          {"batch": 1, "draft_len": 3, "al": 2.9, "tokens_per_s": 330},
          {"batch": 32, "draft_len": 0, "al": 1, "tokens_per_s": 3600},
          {"batch": 32, "draft_len": 3, "al": 2.9, "tokens_per_s": 5600}]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    d = tmp_path_factory.mktemp("cal")
    r = run("calibrate", write_points(d / "points.yaml", POINTS), "--out", d / "cal.yaml", "--plot", d / "fit.png")
    assert r.exit_code == 0, r.output
    return d / "cal.yaml"


def test_calibration_file_holds_setup_figures_points_and_fit(calibrated):
    doc = yaml.safe_load(calibrated.read_text())
    assert doc["format"] == FORMAT
    assert doc["setup"] == {**SETUP, "tp": 1, "ep": 1, "quant": "none", "draft_model": None}
    assert set(doc["fit"]["fitted"]) == {k for k, v in doc["parameters"].items() if v["fitted"]}
    assert {"kernel_scale", "step_us", "verify_split"} <= set(doc["fit"]["fitted"])
    assert [p["tokens_per_s"] for p in doc["points"]] == [150, 330, 3600, 5600]
    assert doc["fit"]["median_abs_error_after"] < doc["fit"]["median_abs_error_before"]
    assert (calibrated.parent / "fit.png").stat().st_size > 0


@pytest.mark.parametrize("point", POINTS)
def test_plan_with_the_calibration_prices_each_point_as_the_fit_did(calibrated, point):
    doc = yaml.safe_load(calibrated.read_text())
    fitted = next(p for p in doc["points"] if p["batch"] == point["batch"] and p["draft_len"] == point["draft_len"])
    d = point["draft_len"]
    acc = f"al={point['al']}@{d}" if d else "al=2.9@3"
    r = run("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3", "--acceptance", acc,
            "--draft-len", d, "--batch", point["batch"], "--context", 2048, "--calibration", calibrated, "--json")
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    row = rec["rows"][0]
    assert row["tokens_per_s"] == pytest.approx(fitted["predicted_after"], rel=2e-5)
    assert rec["provenance"]["cost_model"]["calibration"] == str(calibrated)
    assert rec["provenance"]["cost_model"]["engine"] == "vllm"  # --engine defaults to the calibration's


@pytest.mark.parametrize("args, field", [
    (("--gpu", "h200"), "gpu 'h200' (calibrated: 'h100')"),
    (("--gpu", "h100", "--engine", "sglang"), "engine 'sglang' (calibrated: 'vllm')"),
    (("--gpu", "h100", "--tp", "2"), "tp 2 (calibrated: 1)"),
    (("--gpu", "h100", "--quant", "fp8"), "quant 'fp8' (calibrated: 'none')"),
    (("--gpu", "h100", "--model", "llama-3.1-70b"), "model 'llama-3.1-70b'"),
])
def test_plan_refuses_a_calibration_fitted_for_another_setup(calibrated, args, field):
    argv = ["plan", "--model", "llama-3.1-8b", "--drafter", "eagle3", "--acceptance", "al=2.9@3", "--batch", "1",
            "--calibration", calibrated, *args]
    r = CliRunner().invoke(main, [str(a) for a in argv])
    assert r.exit_code != 0
    assert "fitted for another setup" in r.output and field in r.output


def test_plan_refuses_a_calibration_for_a_drafter_it_did_not_measure(calibrated):
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3,ngram",
                                  "--acceptance", "al=2.9@3", "--batch", "1", "--calibration", str(calibrated)])
    assert r.exit_code != 0 and "drafter ngram (calibrated: 'eagle3'" in r.output


def test_calibration_option_tells_a_cost_table_from_a_calibration_by_its_format(calibrated, tmp_path):
    from trtspec.recipes.calibration import CostTable
    from trtspec.recipes.errors import CalibrationError
    from trtspec.recipes.user_calibration import DeploymentCalibration

    table = tmp_path / "cost_table.json"
    table.write_text(json.dumps({"format": "trtspec.cost_table/v1", "device": "cpu", "source": "test",
                                 "target": {"1": {"1": 0.01, "4": 0.012}}, "draft": {"1": {"1": 0.001}}}))
    assert isinstance(read_calibration(table), CostTable)
    assert isinstance(read_calibration(calibrated), DeploymentCalibration)
    other = tmp_path / "other.yaml"
    other.write_text("format: something/v9\n")
    with pytest.raises(CalibrationError, match="expected 'trtspec.cost_table/v1' .* or 'trtspec.deployment_calib"):
        read_calibration(other)


# ---- bad inputs: one line naming the field (and row), before anything is fitted -------------------------------------

BAD_ROWS = [
    ({"batch": 1, "draft_len": 3, "tokens_per_s": 300}, "points[0]: missing column 'al'"),
    ({"batch": 1, "draft_len": 3, "al": 4.5, "tokens_per_s": 300}, "points[0]: al 4.5 outside [1, draft_len + 1 = 4]"),
    ({"batch": 1, "draft_len": 3, "al": 0.8, "tokens_per_s": 300}, "points[0]: al 0.8 outside [1, draft_len + 1"),
    ({"batch": 1, "draft_len": 3, "al": 2.5, "tokens_per_s": -5}, "points[0]: tokens_per_s must be > 0, got -5"),
    ({"batch": 1, "draft_len": 3, "al": 2.5, "tokens_per_s": 0}, "points[0]: tokens_per_s must be > 0, got 0"),
    ({"batch": 1, "draft_len": -1, "al": 1, "tokens_per_s": 300}, "points[0]: draft_len: expected an integer >= 0"),
    ({"batch": 0, "draft_len": 1, "al": 1, "tokens_per_s": 300}, "points[0]: batch: expected an integer >= 1"),
    ({"batch": 1, "draft_len": 0, "al": 1.5, "tokens_per_s": 300}, "points[0]: al must be 1 at draft_len 0"),
    ({"batch": 1, "draft_len": 2, "al": 2}, "points[0]: missing column 'tokens_per_s' or 'speedup'"),
    ({"batch": 1, "draft_len": 2, "al": 2, "tokens_per_s": 1, "speedup": 1.2},
     "points[0]: both columns 'tokens_per_s' and"),
    ({"batch": 1, "draft_len": 2, "al": 2, "tok_s": 100}, "points[0]: unknown column 'tok_s'"),
]
BAD_SETUPS = [({"gpu": "h900"}, "setup.gpu: unknown GPU"), ({"model": "no-such-model"}, "setup.model: --model"),
              ({"engine": "tgi"}, "setup.engine: unknown engine 'tgi'"), ({"drafter": "magic"}, "setup.drafter")]


def _refused(monkeypatch, tmp_path, path, *extra):
    import trtspec.recipes.user_fit as uf

    monkeypatch.setattr(uf, "fit", lambda *a, **k: pytest.fail("the fit ran on a bad input"))
    out = tmp_path / "cal.yaml"
    r = CliRunner().invoke(main, ["calibrate", str(path), "--out", str(out), *extra])
    assert r.exit_code != 0 and not out.exists()
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    return lines[0]


@pytest.mark.parametrize("row, message", BAD_ROWS)
def test_a_bad_row_is_refused_naming_the_row_and_field(monkeypatch, tmp_path, row, message):
    path = write_points(tmp_path / "points.yaml", [row])
    line = _refused(monkeypatch, tmp_path, path)
    assert f"{path} {message}" in line


@pytest.mark.parametrize("change, message", BAD_SETUPS)
def test_a_bad_setup_is_refused_naming_the_field(monkeypatch, tmp_path, change, message):
    path = write_points(tmp_path / "points.yaml", POINTS, {**SETUP, **change})
    assert message in _refused(monkeypatch, tmp_path, path)


def test_csv_rows_are_checked_by_line_and_a_missing_header_column_is_named(monkeypatch, tmp_path):
    path = tmp_path / "points.csv"
    path.write_text("batch,draft_len,al,tokens_per_s\n1,0,1,150\n4,3,5.0,300\n")
    line = _refused(monkeypatch, tmp_path, path, "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3")
    assert f"{path} line 3: al 5.0 outside [1, draft_len + 1 = 4]" in line
    path.write_text("batch,draft_len,tokens_per_s\n1,0,150\n")
    line = _refused(monkeypatch, tmp_path, path, "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3")
    assert f"{path}: missing column 'al' in the header" in line


def test_setup_from_the_file_and_the_options_must_agree(tmp_path):
    path = write_points(tmp_path / "points.yaml", POINTS)
    with pytest.raises(CalibrationInputError, match="--gpu 'h200' differs from setup.gpu 'h100'"):
        read_inputs([path], {"gpu": "h200"})
    dep = read_inputs([path], {"tp": None, "quant": "fp8"})  # None: not given; a missing field is completed
    assert dep.setup.quant == "fp8" and dep.setup.tp == 1 and len(dep.points) == 4


def _bench_json(path, runner: str, concurrency: int, draft_len: int, tokens_per_s: float):
    """A bench.json as `trtspec bench` writes it (trtspec.bench.report.result_dict)."""
    from trtspec.bench import metrics as M
    from trtspec.bench.report import result_dict

    recs = [M.RequestRecord(f"q{i}", "coding", num_drafts=10, accepted_tokens=17, accepted_per_pos=(9, 6, 2),
                            output_tokens=27, latency_s=0.2) for i in range(4)]
    prof = M.build_profile(recs, drafter="eagle3", draft_len=draft_len, source="test")
    tput = M.Throughput(108, 108 / tokens_per_s, tokens_per_s, 135.0)
    meta = {"runner": runner, "drafter": "eagle3", "draft_len": draft_len, "concurrency": concurrency,
            "engine": "vllm"}
    path.write_text(json.dumps(result_dict(prof, tput, meta)))
    return path, prof.overall.mean_al


def test_bench_reports_of_a_server_are_points(tmp_path):
    a, al_a = _bench_json(tmp_path / "a.json", "server", 4, 3, 700.0)
    dep = read_inputs([a, write_points(tmp_path / "base.yaml", POINTS[:1])])
    p = dep.points[0]
    assert (p.batch, p.draft_len, p.al, p.value, p.figure) == (4, 3, al_a, 700.0, "tokens_per_s")
    assert dep.setup.engine == "vllm" and dep.setup.drafter == "eagle3"
    with pytest.raises(CalibrationInputError, match="setup.engine 'vllm' differs from 'sglang'"):
        read_inputs([write_points(tmp_path / "sg.yaml", POINTS[:1], {**SETUP, "engine": "sglang"}), a])
    local, _ = _bench_json(tmp_path / "local.json", "local", 4, 3, 700.0)
    with pytest.raises(CalibrationInputError, match="meta.runner 'local'"):
        read_inputs([local], SETUP)


def test_help_documents_every_column_with_units_and_an_example():
    r = run("calibrate", "--help")
    assert r.exit_code == 0
    for col in COLUMNS:
        assert col in r.output
    assert "including the bonus token" in r.output and "output tokens/s summed over all requests" in r.output
    assert "Example points.yaml" in r.output and "batch,draft_len,al,tokens_per_s" in r.output


def test_calibrate_json_output_is_the_file_content(tmp_path):
    r = run("calibrate", write_points(tmp_path / "p.yaml", POINTS), "--out", tmp_path / "c.json", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["path"] == str(tmp_path / "c.json")
    assert json.loads((tmp_path / "c.json").read_text()) == {k: v for k, v in doc.items() if k != "path"}


def test_fit_settings_are_checked():
    with pytest.raises(ValueError, match="noise_sd must be > 0"):
        FitSettings(noise_sd=0)
    with pytest.raises(ValueError, match="at least|no measured point"):
        fit([], load_engine("vllm"), "sequential")


def test_calibrate_uses_the_setup_engine_file_as_prior(tmp_path):
    cal = calibrate(read_inputs([write_points(tmp_path / "p.yaml", POINTS[:2])]))
    prior = load_engine("vllm").params_us()
    assert cal.parameters["step_us"]["prior"] == pytest.approx(prior["step_us"], rel=1e-5)
    assert cal.fit["prior"] == "recipes/engines/vllm.yaml (the corpus fit)"


def test_build_plans_with_the_calibration_and_says_so(tmp_path):
    from runtime_fixtures import make_model

    from trtspec.builder import pipeline
    from trtspec.builder.options import BuildOptions

    target = make_model(tmp_path / "target", hidden=128, seed=0)
    draft = make_model(tmp_path / "draft", hidden=128, seed=1)
    setup = {"model": str(target), "gpu": "h200", "drafter": "draft_model", "draft_model": str(draft),
             "quant": "fp8", "engine": "sglang"}
    points = [{"batch": 1, "draft_len": 0, "al": 1, "tokens_per_s": 900},
              {"batch": 8, "draft_len": 3, "al": 2.5, "tokens_per_s": 9000}]
    cal = tmp_path / "cal.yaml"
    assert run("calibrate", write_points(tmp_path / "p.yaml", points, setup), "--out", cal).exit_code == 0
    seen = {}

    def resolver(spec, **kw):
        seen["recipe"] = pipeline.default_resolver(spec, **kw)
        return seen["recipe"]

    opts = BuildOptions(target=target, draft=draft, out=tmp_path / "bundle", cache_dir=tmp_path / "cache",
                        acceptance="al=2.5@3", calibration=cal)
    res = pipeline.build(opts, dry_run=True, quiet=True, recipe_resolver=resolver)
    cost = seen["recipe"].provenance["cost_model"]
    assert cost["calibration"] == str(cal) and cost["engine"] == "sglang"  # planned for the calibrated engine
    assert any(n.startswith(f"recipe planned with --calibration {cal} (trtspec calibrate: sglang figures fitted "
                            "on 2 points") for n in res.plan["notes"])  # the bundle README's notes
    with pytest.raises(pipeline.BuildError, match=r"fitted for another setup: tp 2 \(calibrated: 1\)"):
        pipeline.build(opts.model_copy(update={"tp": 2}), dry_run=True, quiet=True)
    with pytest.raises(ValueError, match="--calibration applies to --recipe auto"):
        BuildOptions(target=target, draft=draft, recipe="some-book-recipe", calibration=cal)


def test_a_shared_unknown_al_is_fitted_with_the_figures(truth):
    """A published batch sweep at one D that states no AL: the AL is fitted too (bench_calibration.py)."""
    import dataclasses

    from trtspec.recipes.errors import CalibrationError

    dep = synthetic(truth, [(1, 0), (1, 3), (64, 0), (64, 3)], noise=0.0)
    obs = [dataclasses.replace(o, case=dataclasses.replace(o.case, al=1.0)) for o in observations(dep)]  # AL unknown
    res = fit(obs, load_engine("vllm"), "sequential", free_al=True)
    assert res.al == pytest.approx(al(3), rel=0.02)
    assert 1.0 <= res.al_before <= 4.0 and res.summary["shared_al"]["after"] == pytest.approx(res.al, rel=1e-5)
    assert res.summary["median_abs_error_after"] < 0.02
    mixed = observations(synthetic(truth, [(1, 2), (1, 3)]))
    with pytest.raises(CalibrationError, match="shared unknown AL needs every speculative point at one D"):
        fit(mixed, load_engine("vllm"), "sequential", free_al=True)


def test_a_bench_of_a_server_is_read_as_its_point(tmp_path):
    """`trtspec bench --server` (against the fake OpenAI server of test_bench_runners) writes a bench.json that
    `trtspec calibrate` reads: its concurrency, D, AL and tokens/s, and the engine whose metrics answered."""
    from test_bench_runners import _FakeServer

    class EveryPrompt(dict):  # every request drafts (the fake keys its counters by the prompt's first word)
        def get(self, key, default=None):
            return (10, 25, (8, 5, 2))

    fake = _FakeServer()
    fake.PER_REQUEST = EveryPrompt()
    try:
        r = run("bench", "--server", fake.url, "--model", "m", "--drafter", "eagle3", "--draft-len", 3,
                "--concurrency", 2, "--limit-per-category", 1, "--category", "math", "--max-new-tokens", 4,
                "--no-plots",                "--out", tmp_path / "b")
    finally:
        fake.httpd.shutdown()
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "b" / "bench.json").read_text())
    dep = read_inputs([tmp_path / "b" / "bench.json"], {"model": "llama-3.1-8b", "gpu": "h100"})
    (p,) = dep.points
    assert (p.batch, p.draft_len, p.figure) == (2, 3, "tokens_per_s")
    assert p.al == report["overall"]["mean_al"] and p.value == report["throughput"]["tokens_per_s"]
    assert (dep.setup.engine, dep.setup.drafter) == ("vllm", report["meta"]["drafter"])


def test_plan_refuses_a_calibration_made_against_other_kernel_tables(calibrated, tmp_path):
    doc = yaml.safe_load(calibrated.read_text())
    assert doc["fit"]["kernels"].startswith("perf-db vllm ") and doc["fit"]["kernels"].endswith(" h100_sxm")
    doc["fit"]["kernels"] = "perf-db vllm 0.11.0 h100_sxm"
    stale = tmp_path / "stale.yaml"
    stale.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(main, ["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--drafter", "eagle3",
                                  "--acceptance", "al=2.9@3", "--batch", "1", "--calibration", str(stale)])
    assert r.exit_code != 0 and "calibrated against 'perf-db vllm 0.11.0 h100_sxm'" in r.output
