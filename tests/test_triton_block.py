"""A real tritonserver serving DFlash and DSpark bundles (marker ``tritonserver``): greedy and seeded sampled
requests answer the trtspec runtime's own texts for the same prompts and seeds."""
from __future__ import annotations

import json
import urllib.request

import pytest
import yaml

from block_fixtures import make_block_head
from runtime_fixtures import make_model
from trtspec.triton.server import ServerNotFoundError, TritonServer, find_server

pytestmark = pytest.mark.tritonserver

PROMPTS = ["def f(x):", "class A:", "import os", "while True:"]
NEW = 20
HEADS = {"dflash": dict(drafter="dflash", block_size=5, layer_ids=(0, 1)),
         "dspark": dict(drafter="dspark", block_size=4, layer_ids=(1,), markov_head="gated")}


def _install():
    try:
        return find_server()
    except ServerNotFoundError as e:
        pytest.skip(f"no tritonserver: {str(e).splitlines()[0]} (install: bash .ci/install_tritonserver)")


def _bundle(root, target, drafter):
    b = root / drafter
    b.mkdir()
    (b / "target").symlink_to(target, target_is_directory=True)
    make_block_head(b / "draft", target, seed=7, **HEADS[drafter])
    D = HEADS[drafter]["block_size"] - (1 if drafter == "dflash" else 0)
    (b / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": {"dflash": "DFlash", "dspark": "DSpark"}[drafter], "max_draft_len": D,
        "speculative_model": "./draft"}}))
    return b


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from trtspec.triton.repository import write_repository

    install = _install()
    root = tmp_path_factory.mktemp("triton_block")
    target = make_model(root / "target", seed=1, layers=2, init=0.3)
    bundles = {d: _bundle(root, target, d) for d in HEADS}
    repo = root / "repo"
    for d, b in bundles.items():
        write_repository(b, repo, d)
    srv = TritonServer(repo, install=install, log_path=root / "tritonserver.log")
    srv.start(timeout=180)
    yield srv, bundles
    srv.stop()


def _generate(server, model, payload):
    req = urllib.request.Request(f"http://{server.http_url}/v2/models/{model}/generate",
                                 data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read().decode())


def _runtime(bundle, requests):
    """The runtime's texts for the requests (one batch, each with its own sampling and seed)."""
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    b = read_bundle(bundle)
    pipe = load_pipeline(str(b.target), str(b.draft), drafter=b.drafter, draft_len=b.draft_len)
    eng = pipe.engine(max_batch_size=len(requests))
    out = {i: [] for i in range(len(requests))}
    for i, r in enumerate(requests):
        eng.add_request(i, pipe.tokenizer.encode(r["text_input"]), pipe.params(
            max_new_tokens=NEW, temperature=r.get("sampling_param_temperature", 0.0),
            top_p=r.get("sampling_param_top_p", 1.0), seed=r.get("sampling_param_seed")))
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return [pipe.tokenizer.decode(out[i]) for i in range(len(requests))], pipe


@pytest.mark.parametrize("drafter", sorted(HEADS))
def test_block_bundle_answers_greedy_and_sampled_requests_with_the_runtime_texts(served, drafter):
    srv, bundles = served
    greedy = [{"text_input": p, "sampling_param_max_tokens": NEW, "sampling_param_return_perf_metrics": True}
              for p in PROMPTS]
    sampled = [{"text_input": p, "sampling_param_max_tokens": NEW, "sampling_param_temperature": 0.8,
                "sampling_param_top_p": 0.9, "sampling_param_seed": 100 + i} for i, p in enumerate(PROMPTS)]
    want_greedy, pipe = _runtime(bundles[drafter], greedy)
    want_sampled, _ = _runtime(bundles[drafter], sampled)
    drafted = 0
    for req, want in zip(greedy, want_greedy):
        out = _generate(srv, drafter, req)
        assert out["text_output"] == want
        drafted += out["total_draft_tokens"]
    assert drafted > 0                                    # the block drafter ran
    for req, want in zip(sampled, want_sampled):
        assert _generate(srv, drafter, req)["text_output"] == want
    log = srv.log_path.read_text()
    assert f"drafter {drafter}" in log
