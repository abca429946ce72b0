"""TritonRunner against trtspec's Triton model served by a real tritonserver (skipped without one):
the acceptance it reads from the model's Prometheus counters must equal the local runtime's own
counters on the same prompts (steps, accepted tokens, per-position counts, per category)."""
from __future__ import annotations

import pytest
import yaml

from runtime_fixtures import make_model
from trtspec.bench import datasets as ds
from trtspec.bench.runners import LocalRunner, RunConfig, TritonRunner, build_run_profile

pytestmark = pytest.mark.tritonserver
MODEL = "trtspec"
D = 3


def _install():
    from trtspec.triton.server import ServerNotFoundError, find_server

    try:
        return find_server()
    except ServerNotFoundError as e:
        pytest.skip(f"no tritonserver: {str(e).splitlines()[0]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from trtspec.triton.repository import write_repository
    from trtspec.triton.server import TritonServer

    install = _install()
    root = tmp_path_factory.mktemp("bundle")
    target = make_model(root / "target", seed=0, init=0.3)
    make_model(root / "draft", seed=1, from_model=target, noise=0.02)
    (root / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": "Draft_Target", "max_draft_len": D, "speculative_model": "draft"}}))
    repo = tmp_path_factory.mktemp("repo")
    write_repository(root, repo, MODEL)
    srv = TritonServer(repo, install=install, log_path=repo.parent / "tritonserver.log")
    srv.start(timeout=180)
    yield root, srv
    srv.stop()


def test_triton_runner_reads_acceptance_from_metrics(served):
    root, srv = served
    prompts = [ds.Prompt(f"q{i}", cat, "", (text,), "", "", "", False)
               for i, (cat, text) in enumerate([("coding", "def f(x):"), ("coding", "import os\n"),
                                                ("qa", "What is a list?"), ("qa", "class A:")])]
    cfg = RunConfig(max_new_tokens=12, concurrency=2)
    runner = TritonRunner(srv.grpc_url, MODEL, draft_len=D, metrics_url=srv.metrics_url)
    trt = runner.run(prompts, cfg)
    local = LocalRunner.load(root / "target", root / "draft", draft_len=D).run(prompts, RunConfig(max_new_tokens=12))
    assert trt.texts == local.texts
    assert all(r.num_drafts == 0 and r.accepted_per_pos is None for r in trt.records)  # nothing summed per response
    for category in ("coding", "qa"):
        recs = [r for r in local.records if r.category == category]
        d = trt.category_deltas[category]
        assert d.exact and d.num_steps == sum(r.num_drafts for r in recs)
        assert d.accepted_tokens == sum(r.accepted_tokens for r in recs)
        assert d.draft_tokens == sum(r.draft_tokens for r in recs)
        per_pos = [sum(r.accepted_per_pos[k] if k < len(r.accepted_per_pos) else 0 for r in recs) for k in range(D)]
        assert d.accepted_per_pos[:D] == per_pos
    prof = build_run_profile(trt, drafter="draft_model", draft_len=D)
    ref = build_run_profile(local, drafter="draft_model", draft_len=D)
    assert set(prof.per_category) == {"coding", "qa"}
    assert prof.overall.mean_al == pytest.approx(ref.overall.mean_al)
    assert prof.overall.rates == pytest.approx(ref.overall.rates)


def test_triton_runner_default_metrics_url_and_bad_url():
    assert TritonRunner("10.0.0.5:8001", MODEL, draft_len=2).metrics_url == "http://10.0.0.5:8002/metrics"
    with pytest.raises(ValueError, match="host:port of Triton's gRPC endpoint"):
        TritonRunner("http://localhost:8001", MODEL, draft_len=2)
