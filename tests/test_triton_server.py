"""A real tritonserver serving a trtspec bundle on loopback (marker ``tritonserver``).

One server is shared by the module; its repository holds the bundle twice: ``trtspec`` (default
settings: greedy requests verified greedily, sampled steps by ``verify_sample``) and
``trtspec_block`` (block verification). The bundle is a tiny random Llama target with a perturbed
copy as draft (partial acceptance) and a byte-level tokenizer, so generations are cheap on CPU;
every text is compared with the trtspec runtime's own output for the same prompt (and seed).
"""
from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from process_guard import default_sigint

from trtspec.triton.server import ServerNotFoundError, TritonServer, find_server

pytestmark = pytest.mark.tritonserver

MODEL = "trtspec"
BLOCK_MODEL = "trtspec_block"
NEW_TOKENS = 24
PROMPTS = [f"{word} {i}: " for i, word in enumerate(
    ["def", "class", "import", "return", "while", "print", "lambda", "yield"] * 16)]  # 128 different prompts


def _server_install():
    try:
        return find_server()
    except ServerNotFoundError as e:
        pytest.skip(f"no tritonserver: {str(e).splitlines()[0]} (install: bash .ci/install_tritonserver)")


def _make_bundle(root: Path) -> Path:
    """target: random Llama (2 layers, hidden 64, byte vocab 258, context 512); draft: target + 3% noise."""
    import torch
    import yaml
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {"<s>": 256, "</s>": 257}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<s>", "</s>"])
    cfg = LlamaConfig(vocab_size=258, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      initializer_range=0.3, bos_token_id=256, eos_token_id=257)
    cfg.architectures = ["LlamaForCausalLM"]
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    target = LlamaForCausalLM(cfg).eval()
    draft = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p, q in zip(draft.parameters(), target.parameters()):
            p.copy_(q + 0.03 * q.std() * torch.randn(q.shape, generator=gen))
    for name, model in (("target", target), ("draft", draft)):
        d = root / name
        model.save_pretrained(d, safe_serialization=True)
        tok.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}))
    (root / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model": "draft"}}))
    return root


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    _server_install()
    return _make_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="module")
def pipeline(bundle):
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    b = read_bundle(bundle)
    return load_pipeline(str(b.target), str(b.draft), drafter=b.drafter, draft_len=b.draft_len)


@pytest.fixture(scope="module")
def greedy(pipeline):
    """prompt -> the runtime's greedy text for NEW_TOKENS new tokens (all prompts in one batch)."""
    return {p: g.text for p, g in zip(PROMPTS, pipeline.generate(PROMPTS, max_new_tokens=NEW_TOKENS))}


def runtime_texts(pipeline, requests: list[dict]) -> list[str]:
    """The runtime's own texts for request payloads (sampling fields and seeds per request), in one batch."""
    eng = pipeline.engine(max_batch_size=len(requests))
    out: dict[int, list[int]] = {i: [] for i in range(len(requests))}
    for i, r in enumerate(requests):
        eng.add_request(i, pipeline.tokenizer.encode(r["text_input"]), pipeline.params(
            max_new_tokens=r.get("sampling_param_max_tokens", NEW_TOKENS),
            temperature=r.get("sampling_param_temperature", 0.0), top_k=r.get("sampling_param_top_k", 0),
            top_p=r.get("sampling_param_top_p", 1.0), seed=r.get("sampling_param_seed")))
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return [pipeline.tokenizer.decode(out[i]) for i in range(len(requests))]


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    from dataclasses import replace

    from trtspec.triton.repository import default_settings, write_repository

    repo = tmp_path_factory.mktemp("repo")
    write_repository(bundle, repo, MODEL)
    write_repository(bundle, repo, BLOCK_MODEL, settings=replace(default_settings(bundle), verify="block"))
    srv = TritonServer(repo, install=_server_install(), log_path=repo.parent / "tritonserver.log")
    srv.start(timeout=180)
    yield srv
    srv.stop()


def _generate(server, payload: dict, stream: bool = False, timeout: float = 120, model: str = MODEL):
    """POST to /generate (-> dict) or /generate_stream (-> list of event dicts); HTTPError on failure."""
    url = f"http://{server.http_url}/v2/models/{model}/{'generate_stream' if stream else 'generate'}"
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read().decode()
    if not stream:
        return json.loads(body)
    return [json.loads(line[len("data: "):]) for line in body.splitlines() if line.startswith("data: ")]


def _grpc_stream(server, prompt: bytes, *, max_tokens=NEW_TOKENS, stream=True, perf=False, extra=(), model=MODEL):
    """Send one request over the gRPC stream; return the list of (text, outputs dict) responses, or raise."""
    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = []

    def add(name, dtype, value):
        t = grpcclient.InferInput(name, [1, 1], dtype)
        t.set_data_from_numpy(np.array([[value]], dtype=object if dtype == "BYTES" else None).astype(
            {"BYTES": object, "INT32": np.int32, "BOOL": bool, "FP32": np.float32, "UINT64": np.uint64}[dtype]))
        inputs.append(t)

    if prompt is not None:
        add("text_input", "BYTES", prompt)
    add("sampling_param_max_tokens", "INT32", max_tokens)
    add("stream", "BOOL", stream)
    add("sampling_param_return_perf_metrics", "BOOL", perf)
    for name, dtype, value in extra:
        add(name, dtype, value)
    outputs = []
    try:
        client.start_stream(callback=lambda result, error: responses.put((result, error)))
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = responses.get(timeout=120)
            if error is not None:
                raise error
            final = result.get_response().parameters["triton_final_response"].bool_param
            if result.as_numpy("text_output") is not None:
                out = {name: result.as_numpy(name) for name in (
                    "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")}
                outputs.append((result.as_numpy("text_output").reshape(-1)[0].decode(), out))
            if final:
                return outputs
    finally:
        client.stop_stream()
        client.close()


# -- loading and matching the runtime ---------------------------------------------------------
def test_repository_loads_and_logs_backend_choice(server):
    for model in (MODEL, BLOCK_MODEL):
        assert {"name": model, "version": "1", "state": "READY"} in server.models()
    log = server.log_path.read_text(errors="replace")
    assert "serving" in log and "with trtspec (" in log  # the choice and its reason, at load
    for verify in ("greedy", "block"):
        assert f"draft_len 3, static speculation, verify {verify}" in log


def test_http_generate_matches_runtime_greedy(server, greedy):
    for prompt in PROMPTS[:3]:
        out = _generate(server, {"text_input": prompt, "sampling_param_max_tokens": NEW_TOKENS})
        assert out["text_output"] == greedy[prompt]
        assert out["model_name"] == MODEL and "acceptance_rate" not in out  # perf only on request


def test_grpc_matches_runtime_greedy(server, greedy):
    prompt = PROMPTS[3]
    responses = _grpc_stream(server, prompt.encode(), stream=False)
    assert [text for text, _ in responses] == [greedy[prompt]]


def test_http_infer_names_the_decoupled_limit(server):
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(server.http_url)
    t = httpclient.InferInput("text_input", [1, 1], "BYTES")
    t.set_data_from_numpy(np.array([[b"x"]], dtype=object))
    with pytest.raises(InferenceServerException, match="decoupled"):
        client.infer(MODEL, [t])
    client.close()


def test_streaming_returns_tokens_incrementally(server, greedy, pipeline):
    # the prompt whose greedy output has the most printable pieces, so streaming has something to show
    prompt = max(PROMPTS[:8], key=lambda p: len(greedy[p].replace("\ufffd", "")))
    pieces = [text for text, _ in _grpc_stream(server, prompt.encode(), stream=True)]
    assert len(pieces) >= 3, pieces
    assert "".join(pieces) == greedy[prompt]
    events = _generate(server, {"text_input": prompt, "sampling_param_max_tokens": NEW_TOKENS, "stream": True},
                       stream=True)
    assert len(events) >= 3 and "".join(e["text_output"] for e in events) == greedy[prompt]
    # each piece is the decode of a growing token prefix
    ids = pipeline.generate([prompt], max_new_tokens=NEW_TOKENS)[0].token_ids
    prefixes = {pipeline.tokenizer.decode(ids[:k]) for k in range(len(ids) + 1)}
    joined = ""
    for piece in pieces[:-1]:
        joined += piece
        assert joined in prefixes


def test_perf_metrics_present_and_consistent(server, pipeline):
    prompt = PROMPTS[5]
    out = _generate(server, {"text_input": prompt, "sampling_param_max_tokens": NEW_TOKENS,
                             "sampling_param_return_perf_metrics": True})
    stats = pipeline.generate([prompt], max_new_tokens=NEW_TOKENS)[0].stats
    assert out["total_draft_tokens"] == stats.draft_tokens > 0
    assert out["total_accepted_draft_tokens"] == stats.accepted_tokens
    assert 0 <= out["total_accepted_draft_tokens"] <= out["total_draft_tokens"]
    assert out["acceptance_rate"] == pytest.approx(stats.accepted_tokens / stats.draft_tokens, rel=1e-6)
    final = _grpc_stream(server, prompt.encode(), stream=True, perf=True)[-1][1]
    assert int(final["total_draft_tokens"].item()) == stats.draft_tokens
    assert int(final["total_accepted_draft_tokens"].item()) == stats.accepted_tokens


def _counters(server) -> dict[str, float]:
    """trtspec_* samples of /metrics: 'name{labels}' -> value."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith("trtspec_")}


def _spec(server, model=MODEL):
    from trtspec.bench.prometheus import parse_metrics, scrape

    return parse_metrics(scrape(server.metrics_url), "trtspec", labels={"model": model})


def test_prometheus_metrics_follow_requests(server, pipeline):
    """Every speculative-decoding metric moves by exactly the runtime's own counts for the request."""
    before, spec_before = _counters(server), _spec(server)
    prompt = PROMPTS[6]
    out = _generate(server, {"text_input": prompt, "sampling_param_max_tokens": NEW_TOKENS,
                             "sampling_param_return_perf_metrics": True})
    with pytest.raises(urllib.error.HTTPError):
        _generate(server, {"text_input": "", "sampling_param_max_tokens": 4})
    after, spec_after = _counters(server), _spec(server)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    g = pipeline.generate([prompt], max_new_tokens=NEW_TOKENS)[0]
    label = f'model="{MODEL}"'
    assert delta[f"trtspec_spec_decode_num_draft_tokens_total{{{label}}}"] == out["total_draft_tokens"] \
        == g.stats.draft_tokens > 0
    assert delta[f"trtspec_spec_decode_num_accepted_tokens_total{{{label}}}"] == out["total_accepted_draft_tokens"] \
        == g.stats.accepted_tokens
    assert delta[f"trtspec_spec_decode_num_drafts_total{{{label}}}"] == g.stats.drafts
    assert delta[f"trtspec_spec_decode_num_steps_total{{{label}}}"] == g.stats.steps
    assert delta[f"trtspec_generation_tokens_total{{{label}}}"] == len(g.token_ids)
    assert delta[f'trtspec_requests_total{{{label},outcome="success"}}'] == 1
    assert delta[f'trtspec_requests_total{{{label},outcome="failure"}}'] == 1
    per_pos = [spec_after.accepted_per_pos.get(k, 0) - spec_before.accepted_per_pos.get(k, 0) for k in range(3)]
    assert per_pos == g.stats.accepted_per_pos + [0] * (3 - len(g.stats.accepted_per_pos))
    # the AL histogram: one count per draft at its AL 1..D+1, mean = 1 + accepted / drafts
    by_al = {al: delta[f'trtspec_spec_decode_num_drafts_by_acceptance_length_total{{acceptance_length="{al}",{label}}}']
             for al in range(1, 5)}
    assert sum(by_al.values()) == g.stats.drafts
    assert sum(al * n for al, n in by_al.items()) == g.stats.drafts + g.stats.accepted_tokens
    assert delta[f"trtspec_spec_decode_step_latency_seconds_count{{{label}}}"] == g.stats.steps  # alone: 1 step each
    assert after[f"trtspec_num_requests_running{{{label}}}"] == 0


def test_cancelled_stream_leaves_the_batch(server):
    """A client that cancels its stream has its request dropped from the batch (not run to the end)."""
    import tritonclient.grpc as grpcclient

    label = f'model="{MODEL}"'
    tokens_key = f"trtspec_generation_tokens_total{{{label}}}"
    long = None
    for prompt in PROMPTS[:16]:  # a prompt whose greedy output runs to the full 256 tokens (no stop token)
        before = _counters(server)
        _generate(server, {"text_input": prompt, "sampling_param_max_tokens": 256})
        if _counters(server)[tokens_key] - before[tokens_key] == 256:
            long = [prompt]
            break
    assert long, "no prompt runs to 256 tokens"
    before = _counters(server)
    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = []
    for name, dtype, value in (("text_input", "BYTES", long[0].encode()), ("sampling_param_max_tokens", "INT32", 256),
                               ("stream", "BOOL", True)):
        t = grpcclient.InferInput(name, [1, 1], dtype)
        t.set_data_from_numpy(np.array([[value]], dtype={"BYTES": object, "INT32": np.int32, "BOOL": bool}[dtype]))
        inputs.append(t)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    client.async_stream_infer(MODEL, inputs)
    result, error = got.get(timeout=60)
    assert error is None and result.as_numpy("text_output") is not None
    client.stop_stream(cancel_requests=True)
    client.close()
    key = f'trtspec_requests_total{{{label},outcome="cancelled"}}'
    deadline = time.monotonic() + 30
    while _counters(server).get(key, 0.0) - before.get(key, 0.0) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _counters(server)
    assert after[key] - before.get(key, 0.0) == 1
    success = f'trtspec_requests_total{{{label},outcome="success"}}'
    assert after[success] == before[success]  # it did not run to completion
    assert after[tokens_key] - before[tokens_key] < 256
    running = f"trtspec_num_requests_running{{{label}}}"
    deadline = time.monotonic() + 10
    while _counters(server)[running] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _counters(server)[running] == 0    # the batch is empty again


# -- bad requests fail alone -----------------------------------------------------------------------
@pytest.mark.parametrize("payload, message", [
    ({"sampling_param_max_tokens": 4}, "text_input"),
    ({"text_input": "x", "sampling_param_max_tokens": 0}, "sampling_param_max_tokens: expected 1..256, got 0"),
    ({"text_input": "x", "sampling_param_max_tokens": -5}, "sampling_param_max_tokens: expected 1..256, got -5"),
    ({"text_input": "x", "sampling_param_max_tokens": 257}, "sampling_param_max_tokens: expected 1..256, got 257"),
    ({"text_input": ""}, "text_input: the prompt is empty"),
    ({"text_input": "y" * 300}, "text_input: prompt of 300 tokens exceeds the limit of 256 tokens"),
    ({"text_input": "z" * 70000}, "text_input: prompt of 70000 bytes exceeds the limit"),
    ({"text_input": "x", "sampling_param_temperature": -0.5},
     "sampling_param_temperature: expected a finite value >= 0, got -0.5"),
    ({"text_input": "x", "sampling_param_temperature": 1.0, "sampling_param_top_p": 0.0},
     "sampling_param_top_p: expected a value in (0, 1], got 0.0"),
    ({"text_input": "x", "sampling_param_temperature": 1.0, "sampling_param_top_p": 1.5},
     "sampling_param_top_p: expected a value in (0, 1], got 1.5"),
    ({"text_input": "x", "sampling_param_top_k": -2}, "sampling_param_top_k: expected >= 0"),
    # wrong dtypes are refused by Triton's generate endpoint against config.pbtxt, before the model sees them
    ({"text_input": "x", "sampling_param_max_tokens": "ten"}, "Unable to parse 'data'"),
    ({"text_input": "x", "sampling_param_max_tokens": 2.5}, "Unable to parse 'data'"),
    ({"text_input": 7}, "Unable to parse JSON bytes array"),
])
def test_bad_request_fails_alone(server, greedy, payload, message):
    with pytest.raises(urllib.error.HTTPError) as e:
        _generate(server, payload)
    assert message in e.value.read().decode()
    out = _generate(server, {"text_input": PROMPTS[0], "sampling_param_max_tokens": NEW_TOKENS})
    assert out["text_output"] == greedy[PROMPTS[0]]


def test_bad_grpc_requests_fail_alone(server, greedy):
    with pytest.raises(Exception, match="text_input: not valid UTF-8"):
        _grpc_stream(server, b"\xff\xfeabc")
    with pytest.raises(Exception, match="text_input"):
        _grpc_stream(server, None)
    with pytest.raises(Exception, match="sampling_param_max_tokens: expected 1..256, got 0"):
        _grpc_stream(server, b"x", max_tokens=0)
    with pytest.raises(Exception, match="sampling_param_temperature: expected a finite value >= 0, got -1.0"):
        _grpc_stream(server, b"x", extra=[("sampling_param_temperature", "FP32", -1.0)])
    with pytest.raises(Exception, match="sampling_param_top_p"):  # wrong dtype: refused by Triton's checks
        _grpc_stream(server, b"x", extra=[("sampling_param_top_p", "INT32", 1)])
    assert [t for t, _ in _grpc_stream(server, PROMPTS[1].encode(), stream=False)] == [greedy[PROMPTS[1]]]


# -- sampling ----------------------------------------------------------------------------------------
def _sampled(prompt: str, seed: int, **kw) -> dict:
    return {"text_input": prompt, "sampling_param_max_tokens": NEW_TOKENS, "sampling_param_temperature": 1.0,
            "sampling_param_top_p": 0.95, "sampling_param_seed": seed, **kw}


def test_seeded_sample_same_alone_and_among_15_concurrent(server, pipeline):
    probe = _sampled(PROMPTS[40], seed=77)
    others = [_sampled(PROMPTS[41 + i], seed=i) if i % 2 else
              {"text_input": PROMPTS[41 + i], "sampling_param_max_tokens": NEW_TOKENS} for i in range(15)]
    want = runtime_texts(pipeline, [probe] + others)
    alone = _generate(server, probe)["text_output"]
    assert alone == want[0]          # the runtime's own text for that seed
    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(_generate, server, r) for r in others[:8]]
        crowded = pool.submit(_generate, server, probe)
        futures += [pool.submit(_generate, server, r) for r in others[8:]]
        assert crowded.result()["text_output"] == alone
        assert [f.result()["text_output"] for f in futures] == want[1:]
    events = _generate(server, dict(probe, stream=True), stream=True)
    assert "".join(e["text_output"] for e in events) == alone   # streamed: the same text
    assert _generate(server, dict(probe, sampling_param_seed=78))["text_output"] != alone


def test_block_verification_model_streams_sampled_text(server, pipeline, bundle):
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    b = read_bundle(bundle)
    block = load_pipeline(str(b.target), str(b.draft), drafter=b.drafter, draft_len=b.draft_len, verify="block")
    requests = [_sampled(PROMPTS[60 + i], seed=500 + i) for i in range(3)]
    want = runtime_texts(block, requests)
    for r, text in zip(requests, want):
        pieces = [t for t, _ in _grpc_stream(server, r["text_input"].encode(), model=BLOCK_MODEL, extra=[
            ("sampling_param_temperature", "FP32", 1.0), ("sampling_param_top_p", "FP32", 0.95),
            ("sampling_param_seed", "UINT64", r["sampling_param_seed"])])]
        assert "".join(pieces) == text
    greedy_out = _generate(server, {"text_input": PROMPTS[0], "sampling_param_max_tokens": NEW_TOKENS}, model=BLOCK_MODEL)
    assert greedy_out["text_output"] == pipeline.generate([PROMPTS[0]], max_new_tokens=NEW_TOKENS)[0].text
    assert _spec(server, BLOCK_MODEL).accepted_tokens > 0


# -- load ------------------------------------------------------------------------------------------
def _client_request(c: int, k: int) -> tuple[str, dict]:
    """Client c's k-th request: (transport, payload). Transports cycle over HTTP generate, HTTP
    generate_stream, gRPC stream (streaming) and gRPC (one response); every second client samples."""
    transport = ("http", "http_stream", "grpc_stream", "grpc")[c % 4]
    payload = {"text_input": PROMPTS[(c * 2 + k) % len(PROMPTS)], "sampling_param_max_tokens": NEW_TOKENS}
    if (c // 4) % 2:
        payload = _sampled(payload["text_input"], seed=1000 * c + k, sampling_param_top_k=50 * (c % 3))
    return transport, payload


def _send(server, transport: str, payload: dict) -> str:
    if transport.startswith("http"):
        stream = transport == "http_stream"
        out = _generate(server, dict(payload, stream=stream) if stream else payload, stream=stream)
        return "".join(e["text_output"] for e in out) if stream else out["text_output"]
    extra = [(name, dtype, payload[name]) for name, dtype in (
        ("sampling_param_temperature", "FP32"), ("sampling_param_top_p", "FP32"), ("sampling_param_top_k", "INT32"),
        ("sampling_param_seed", "UINT64")) if name in payload]
    pieces = _grpc_stream(server, payload["text_input"].encode(), stream=transport == "grpc_stream", extra=extra)
    return "".join(t for t, _ in pieces)


def test_load_64_mixed_clients(server, pipeline, greedy):
    """64 concurrent clients x 2 requests mixing greedy and seeded sampled requests, streaming or not,
    over the generate endpoints and gRPC: no errors, and every text is the runtime's own for its
    prompt and seed (greedy ones equal greedy decoding)."""
    jobs = [(c, k) for c in range(64) for k in range(2)]
    sampled = [j for j in jobs if "sampling_param_seed" in _client_request(*j)[1]]
    assert len(sampled) == 64
    want = {j: greedy[_client_request(*j)[1]["text_input"]] for j in jobs}
    want.update(zip(sampled, runtime_texts(pipeline, [_client_request(*j)[1] for j in sampled])))

    def client(c: int):
        results = []
        for k in range(2):
            transport, payload = _client_request(c, k)
            t0 = time.perf_counter()
            try:
                text, error = _send(server, transport, payload), None
            except Exception as e:  # counted, and the test fails below
                text, error = None, repr(e)
            results.append(((c, k), transport, text, error, time.perf_counter() - t0))
        return results

    before = _counters(server)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(64) as pool:
        results = [r for rs in pool.map(client, range(64)) for r in rs]
    wall = time.perf_counter() - t0
    errors = [r for r in results if r[3] is not None]
    wrong = [(r[0], r[1]) for r in results if r[3] is None and r[2] != want[r[0]]]
    lat = sorted(r[4] for r in results)
    q = statistics.quantiles(lat, n=100)
    tokens = _counters(server)[f'trtspec_generation_tokens_total{{model="{MODEL}"}}'] - \
        before[f'trtspec_generation_tokens_total{{model="{MODEL}"}}']
    report = {"requests": len(results), "errors": len(errors), "mismatches": len(wrong),
              "p50_s": round(q[49], 3), "p90_s": round(q[89], 3), "p99_s": round(q[98], 3),
              "requests_per_s": round(len(results) / wall, 2), "new_tokens_per_s": round(tokens / wall, 1),
              "wall_s": round(wall, 2)}
    print("load test:", json.dumps(report))
    (server.log_path.parent / "load_test.json").write_text(json.dumps(report))
    assert len(results) == 128 and not errors, errors[:3]
    assert not wrong, wrong[:5]


# -- restart and `trtspec serve` --------------------------------------------------------------------
def test_restart_reloads_model(server, greedy):
    server.stop()
    assert server.process is None
    server.start(timeout=180)
    assert {"name": MODEL, "version": "1", "state": "READY"} in server.models()
    out = _generate(server, {"text_input": PROMPTS[2], "sampling_param_max_tokens": NEW_TOKENS})
    assert out["text_output"] == greedy[PROMPTS[2]]


def _pids_mentioning(text: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def test_serve_exits_cleanly_on_sigint(bundle, tmp_path, greedy):
    repo = tmp_path / "served-repo"
    cmd = [sys.executable, "-c", "from trtspec.cli import main; main()", "serve", "--bundle", str(bundle),
           "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--repo", str(repo), "--json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1])] +
                                                        ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        info = json.loads(line)
        url = f"{info['generate']}"
        req = urllib.request.Request(url, data=json.dumps({"text_input": PROMPTS[4], "sampling_param_max_tokens": NEW_TOKENS}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["text_output"] == greedy[PROMPTS[4]]
        assert _pids_mentioning(str(repo)), "the server should be running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while _pids_mentioning(str(repo)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_mentioning(str(repo)) == [], "tritonserver or a stub process survived"
    with pytest.raises(OSError):
        urllib.request.urlopen(info["http"] + "/v2/health/live", timeout=2)


def test_demo_pair_bundle_serves_greedy(tmp_path):
    """The shipped demo pair laid out as a bundle (target/, draft/, llm_api.yaml as `trtspec build` writes
    them) loads in its own server and answers the runtime's greedy text with the same acceptance counters."""
    import yaml

    try:
        from trtspec.zoo import demo_paths

        target, draft = demo_paths()
    except (ImportError, FileNotFoundError) as e:
        pytest.skip(f"demo pair not available: {e}")
    from trtspec.runtime import load_pipeline
    from trtspec.triton.repository import write_repository

    install = _server_install()
    bundle = tmp_path / "demo"
    bundle.mkdir()
    (bundle / "target").symlink_to(target, target_is_directory=True)
    (bundle / "draft").symlink_to(draft, target_is_directory=True)
    (bundle / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": "Draft_Target", "max_draft_len": 4, "max_total_draft_tokens": 4,
        "speculative_model": "./draft", "draft_len_schedule": {8: 4, 64: 2}}}))
    prompts = ["def fibonacci(n):\n", "import os\nimport sys\n\n"]
    want = load_pipeline(target, draft, draft_len=4, draft_len_schedule={8: 4, 64: 2}).generate(
        prompts, max_new_tokens=32)
    write_repository(bundle, bundle / "triton")
    with TritonServer(bundle / "triton", install=install, log_path=tmp_path / "demo.log") as srv:
        for prompt, g in zip(prompts, want):
            out = _generate(srv, {"text_input": prompt, "sampling_param_max_tokens": 32,
                                  "sampling_param_return_perf_metrics": True})
            assert out["text_output"] == g.text
            assert out["total_draft_tokens"] == g.stats.draft_tokens > 0
            assert out["total_accepted_draft_tokens"] == g.stats.accepted_tokens
        assert "draft_len 4, schedule {8: 4, 64: 2}" in srv.log_path.read_text()


def test_model_load_failure_is_reported_with_its_cause(bundle, tmp_path):
    """A bundle whose target weights are truncated: the server does not come up, and the error names
    the model, the file and what is wrong with it."""
    import shutil

    from trtspec.triton.repository import write_repository

    broken = tmp_path / "broken"
    shutil.copytree(bundle, broken)
    weights = broken / "target" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    write_repository(broken, tmp_path / "repo", MODEL)
    srv = TritonServer(tmp_path / "repo", install=_server_install(), log_path=tmp_path / "broken.log")
    with pytest.raises(RuntimeError) as e:
        srv.start(timeout=120)
    message = str(e.value)
    first = message.splitlines()[0]
    assert first.startswith(f"model {MODEL!r} failed to load: "), message[:500]
    assert "broken/target/model.safetensors: corrupt or truncated safetensors file" in first, first
    assert srv.process is None
