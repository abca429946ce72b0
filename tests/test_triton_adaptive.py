"""Adaptive speculation in the Triton model: the per-model parameter, the bundle's repository, step
costs and prior for a served bundle, and the draft-length histogram on the metrics port."""
from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest
import yaml

from test_triton_backend import _PromClient
from test_triton_server import NEW_TOKENS, PROMPTS, _make_bundle
from trtspec.triton.backends import ReferenceBackend
from trtspec.triton.bundle import read_bundle
from trtspec.triton.protocol import GenerationRequest, ModelSettings
from trtspec.triton.repository import default_settings, write_repository


def cost_table(path, draft_s=0.28):
    """A synthetic table: 10 + 2 (T - 1) per request and step, ``draft_s`` per request and draft step."""
    doc = {"format": "trtspec.cost_table/v1", "device": "synthetic", "source": "tests",
           "target": {str(b): {str(t): b * (10.0 + 2.0 * (t - 1)) for t in range(1, 9)} for b in (1, 8)},
           "draft": {str(b): {"1": b * draft_s} for b in (1, 8)}}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return _make_bundle(tmp_path_factory.mktemp("bundle"))


def test_settings_carry_speculation_and_a_relative_cost_table(tmp_path):
    with pytest.raises(ValueError, match="speculation: expected one of static, adaptive, got 'dynamic'"):
        ModelSettings(bundle=tmp_path, speculation="dynamic")
    assert ModelSettings(bundle=tmp_path).speculation == "static"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump({"bundle": "b", "speculation": "adaptive",
                                                     "cost_table": "costs/ct.json"}))
    s = ModelSettings.load(tmp_path / "m.yaml")
    assert s.speculation == "adaptive" and s.cost_table == (tmp_path / "costs" / "ct.json").resolve()
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(s.to_dict()))
    assert ModelSettings.load(tmp_path / "full.yaml") == s


def test_build_writes_the_repository_parameter_from_build_speculation(bundle, tmp_path):
    from trtspec.builder.pipeline import write_triton

    for mode in ("static", "adaptive"):
        work = tmp_path / mode
        work.mkdir()
        for name in ("target", "draft", "llm_api.yaml"):
            (work / name).symlink_to(bundle / name)
        write_triton(work, tmp_path / f"final-{mode}", speculation=mode)
        settings = yaml.safe_load((work / "triton" / "trtspec" / "1" / "model.yaml").read_text())
        assert settings["speculation"] == mode and settings["cost_table"] is None


def test_prior_comes_from_the_bundle_then_the_recipe(tmp_path):
    from trtspec.bench.adaptive import find_prior

    assert find_prior("draft_model", bundle=tmp_path) == (None, "the controller's default")
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump({"acceptance": {"draft_model": {"rates": [0.8, 0.6]}}}))
    assert find_prior("draft_model", bundle=tmp_path)[0] == (0.8, 0.6)
    assert find_prior("eagle3", bundle=tmp_path)[0] is None
    (tmp_path / "acceptance.json").write_text(json.dumps({"drafter": "draft_model", "rates": [0.9, 0.7, 0.5]}))
    prior, where = find_prior("draft_model", bundle=tmp_path)
    assert prior == (0.9, 0.7, 0.5) and where.endswith("acceptance.json")
    # a bundle whose target links to a model folder with a profile beside it (the demo pair's layout)
    pair, linked = tmp_path / "pair", tmp_path / "linked"
    (pair / "target").mkdir(parents=True)
    linked.mkdir()
    (linked / "target").symlink_to(pair / "target", target_is_directory=True)
    (pair / "acceptance.json").write_text(json.dumps({"drafter": "eagle3", "rates": [0.5]}))
    assert find_prior("eagle3", bundle=linked, target=linked / "target")[0] == (0.5,)
    assert find_prior("draft_model", bundle=linked, target=linked / "target")[0] is None


def _run(backend, requests):
    chunks = [[] for _ in requests]
    done = [threading.Event() for _ in requests]
    for i, r in enumerate(requests):
        backend.submit(r, lambda c, i=i: (chunks[i].append(c), c.final and done[i].set()))
    for d in done:
        assert d.wait(120)
    return ["".join(c.text for c in cs) for cs in chunks], [cs[-1] for cs in chunks]


def test_adaptive_model_serves_the_runtimes_greedy_text_and_exports_draft_lengths(bundle, tmp_path):
    from trtspec.triton.metrics import SpecMetrics

    prom = _PromClient()
    settings = replace(default_settings(bundle), speculation="adaptive", cost_table=cost_table(tmp_path / "ct.json"))
    b = ReferenceBackend(read_bundle(bundle), settings, SpecMetrics(prom, "m", max_draft_len=3))
    try:
        assert b.pipeline.spec.speculation == "adaptive" and b.engine.controller is not None
        texts, finals = _run(b, [GenerationRequest(PROMPTS[i], NEW_TOKENS) for i in range(6)])
        steps = b.engine.step_count
    finally:
        b.shutdown()
    static = ReferenceBackend(read_bundle(bundle), default_settings(bundle))
    try:
        assert texts == _run(static, [GenerationRequest(PROMPTS[i], NEW_TOKENS) for i in range(6)])[0]
    finally:
        static.shutdown()
    text = prom.text()
    buckets = {line.split('le="')[1].split('"')[0]: float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("trtspec_spec_decode_draft_len_bucket")}
    assert sorted(buckets) == ["+Inf", "0.0", "1.0", "2.0", "3.0"]
    assert buckets["+Inf"] == steps                                     # one observation per engine step
    count = next(float(x.split()[-1]) for x in text.splitlines() if x.startswith("trtspec_spec_decode_draft_len_count"))
    assert count == steps and buckets["3.0"] == steps                  # every chosen depth within 0..D_max
    assert sum(f.draft_tokens for f in finals) > 0


def test_adaptive_without_a_cost_table_measures_one_at_load(bundle, tmp_path, caplog):
    import logging

    settings = replace(default_settings(bundle), speculation="adaptive", max_active=4)
    with caplog.at_level(logging.INFO, logger="trtspec"):
        b = ReferenceBackend(read_bundle(bundle), settings)
    try:
        costs = b.pipeline.adaptive.costs
        assert costs.priced_sampled and costs.seconds("sample", 4, 4, 3) > 0
        assert any("step costs measured now" in r.getMessage() for r in caplog.records)
    finally:
        b.shutdown()
    missing = replace(settings, cost_table=tmp_path / "absent.json")
    with pytest.raises(FileNotFoundError, match="cost_table: .*absent.json does not exist"):
        ReferenceBackend(read_bundle(bundle), missing)


def test_serve_and_generate_offer_speculation(bundle, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli import main

    res = CliRunner().invoke(main, ["serve", "--help"])
    assert "--speculation [static|adaptive]" in res.output and "--cost-table" in res.output
    b = read_bundle(bundle)
    res = CliRunner().invoke(main, ["generate", "--target", str(b.target), "--draft", str(b.draft), "--json",
                                    "--max-new-tokens", "8", "--speculation", "adaptive", "--cost-table",
                                    str(cost_table(tmp_path / "ct.json")), "def ", "class "])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["spec"]["speculation"] == "adaptive"
    plain = CliRunner().invoke(main, ["generate", "--target", str(b.target), "--draft", str(b.draft), "--json",
                                      "--max-new-tokens", "8", "def ", "class "])
    assert [g["text"] for g in out["generations"]] == [g["text"] for g in json.loads(plain.stdout)["generations"]]
    assert sum(out["stats"]["draft_len_counts"]) == out["stats"]["steps"]


@pytest.mark.tritonserver
def test_real_server_serves_an_adaptive_model_with_its_histogram(bundle, tmp_path):
    from test_triton_server import _generate, _server_install
    from trtspec.bench.prometheus import scrape
    from trtspec.triton.server import TritonServer

    repo = tmp_path / "repo"
    write_repository(bundle, repo, "adaptive", settings=replace(default_settings(bundle), speculation="adaptive",
                                                                 cost_table=cost_table(tmp_path / "ct.json")))
    write_repository(bundle, repo, "static")
    srv = TritonServer(repo, install=_server_install(), log_path=tmp_path / "server.log")
    with srv.start(timeout=180):
        payload = {"text_input": PROMPTS[3], "sampling_param_max_tokens": NEW_TOKENS}
        assert _generate(srv, payload, model="adaptive")["text_output"] == \
            _generate(srv, payload, model="static")["text_output"]
        text = scrape(srv.metrics_url)
        assert "adaptive speculation" in srv.log_tail(400)
    lines = [x for x in text.splitlines() if x.startswith("trtspec_spec_decode_draft_len_count")]
    counts = {x.split('model="')[1].split('"')[0]: float(x.split()[-1]) for x in lines}
    assert counts["adaptive"] > 0 and counts["static"] > 0
