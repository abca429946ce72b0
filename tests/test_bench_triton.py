"""TritonRunner against trtspec's Triton model served by a real tritonserver (skipped without one):
its per-request acceptance outputs must equal the local runtime's counters on the same prompts."""
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


def test_triton_runner_counts_equal_local_runtime(served):
    root, srv = served
    prompts = [ds.Prompt(f"q{i}", cat, "", (text,), "", "", "", False)
               for i, (cat, text) in enumerate([("coding", "def f(x):"), ("coding", "import os\n"),
                                                ("qa", "What is a list?"), ("qa", "class A:")])]
    cfg = RunConfig(max_new_tokens=12, concurrency=2)
    trt = TritonRunner(srv.grpc_url, MODEL, draft_len=D).run(prompts, cfg)
    local = LocalRunner.load(root / "target", root / "draft", draft_len=D).run(prompts, RunConfig(max_new_tokens=12))
    by_id = {r.question_id: r for r in local.records}
    for r in trt.records:
        ref = by_id[r.question_id]
        assert r.accepted_tokens == ref.accepted_tokens
        assert r.draft_tokens == ref.draft_tokens
        assert trt.texts[r.question_id] == local.texts[r.question_id]
    prof = build_run_profile(trt, drafter="draft_model", draft_len=D)
    assert prof.overall.rates_fitted and set(prof.per_category) == {"coding", "qa"}
    assert 1.0 <= prof.overall.mean_al <= D + 1
