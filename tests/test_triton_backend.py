"""The trtspec backend of the Triton model, in-process (no server): continuous batching, streaming
pieces, and failure isolation."""
from __future__ import annotations

import threading

import pytest

from test_triton_server import NEW_TOKENS, PROMPTS, _make_bundle
from trtspec.triton.backends import ReferenceBackend, choose_backend
from trtspec.triton.bundle import read_bundle
from trtspec.triton.protocol import GenerationRequest, RequestError
from trtspec.triton.repository import default_settings


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    root = _make_bundle(tmp_path_factory.mktemp("bundle"))
    b = ReferenceBackend(read_bundle(root), default_settings(root))
    yield b
    b.shutdown()


def _run(backend, requests: list[GenerationRequest], timeout: float = 60.0) -> list[list]:
    """Submit all requests at once; return each one's chunks."""
    chunks: list[list] = [[] for _ in requests]
    done = [threading.Event() for _ in requests]

    def emit(i, chunk):
        chunks[i].append(chunk)
        if chunk.final:
            done[i].set()

    for i, r in enumerate(requests):
        backend.submit(r, lambda c, i=i: emit(i, c))
    for d in done:
        assert d.wait(timeout)
    return chunks


def test_choose_backend_without_tensorrt_llm():
    import importlib.util

    if importlib.util.find_spec("tensorrt_llm") is not None:
        pytest.skip("tensorrt_llm is installed here")
    from pathlib import Path

    from trtspec.triton.protocol import ModelSettings

    assert choose_backend(ModelSettings(bundle=Path("."))) == ("trtspec", "tensorrt_llm is not installed")
    assert choose_backend(ModelSettings(bundle=Path("."), backend="trtspec"))[0] == "trtspec"


def test_batched_streams_match_greedy_each(backend):
    prompts = PROMPTS[:12]
    want = backend.pipeline.generate(prompts, max_new_tokens=NEW_TOKENS)
    chunks = _run(backend, [GenerationRequest(p, NEW_TOKENS, stream=i % 2 == 0) for i, p in enumerate(prompts)])
    for i, (g, cs) in enumerate(zip(want, chunks)):
        assert all(c.error is None for c in cs)
        assert [c.final for c in cs] == [False] * (len(cs) - 1) + [True]
        assert "".join(c.text for c in cs) == g.text
        if i % 2:
            assert len(cs) == 1  # not streaming: one response with the whole text
        assert (cs[-1].draft_tokens, cs[-1].accepted_draft_tokens) == (g.stats.draft_tokens, g.stats.accepted_tokens)


def test_engine_failure_fails_running_requests_only(backend, monkeypatch):
    real_step = backend.engine.step
    calls = {"n": 0}

    def flaky_step():
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected")
        return real_step()

    monkeypatch.setattr(backend.engine, "step", flaky_step)
    chunks = _run(backend, [GenerationRequest(PROMPTS[20], NEW_TOKENS)])
    assert chunks[0][-1].error == "generation failed: RuntimeError: injected"
    # a fresh engine replaced the failed one and serves the next request correctly
    want = backend.pipeline.generate([PROMPTS[21]], max_new_tokens=NEW_TOKENS)[0].text
    assert _run(backend, [GenerationRequest(PROMPTS[21], NEW_TOKENS)])[0][-1].text == want


def test_submit_rejects_before_queueing(backend, monkeypatch):
    with pytest.raises(RequestError, match="prompt of 300 tokens exceeds the limit of 256 tokens"):
        backend.submit(GenerationRequest("y" * 300, 4), lambda c: None)
    from dataclasses import replace

    # limits edited past the context (model.yaml) are still caught per request
    monkeypatch.setattr(backend, "settings", replace(backend.settings, max_prompt_tokens=400))
    with pytest.raises(RequestError, match="256 new tokens after a prompt of 300 tokens exceed the context of 512"):
        backend.submit(GenerationRequest("y" * 300, 256), lambda c: None)


# -- sampling ---------------------------------------------------------------------------------------
def _engine_texts(pipeline, requests: list[GenerationRequest]) -> list[str]:
    """The runtime's own texts for these requests, all in one engine batch (their seeds per request)."""
    eng = pipeline.engine(max_batch_size=len(requests))
    out: dict[int, list[int]] = {i: [] for i in range(len(requests))}
    for i, r in enumerate(requests):
        eng.add_request(i, pipeline.tokenizer.encode(r.prompt), pipeline.params(
            max_new_tokens=r.max_tokens, temperature=r.temperature, top_k=r.top_k, top_p=r.top_p, seed=r.seed))
    while eng.has_work():
        for o in eng.step():
            out[o.request_id] += o.new_token_ids
    return [pipeline.tokenizer.decode(out[i]) for i in range(len(requests))]


def _text(chunks) -> str:
    assert all(c.error is None for c in chunks), chunks[-1].error
    return "".join(c.text for c in chunks)


def test_seeded_sample_same_alone_and_among_15_others(backend):
    probe = GenerationRequest(PROMPTS[30], NEW_TOKENS, temperature=1.0, top_p=0.95, seed=1234, stream=True)
    alone = _text(_run(backend, [probe])[0])
    others = [GenerationRequest(PROMPTS[31 + i], NEW_TOKENS, temperature=0.8 if i % 2 else 0.0, top_k=20 * (i % 3),
                                seed=i if i % 4 else None, stream=i % 3 == 0) for i in range(15)]
    for position in (0, 7, 15):   # the probe at the front, the middle and the back of a batch of 16
        batch = others[:position] + [probe] + others[position:]
        chunks = _run(backend, batch)
        assert _text(chunks[position]) == alone
        # greedy neighbours stay exactly greedy
        for r, cs in zip(batch, chunks):
            if r.temperature == 0:
                assert _text(cs) == backend.pipeline.generate([r.prompt], max_new_tokens=NEW_TOKENS)[0].text
    # the served text is the runtime's own for that seed; another seed gives another text
    assert _engine_texts(backend.pipeline, [probe])[0] == alone
    assert _text(_run(backend, [GenerationRequest(PROMPTS[30], NEW_TOKENS, temperature=1.0, top_p=0.95,
                                                  seed=1235)])[0]) != alone


@pytest.fixture(scope="module")
def block_backend(tmp_path_factory):
    from dataclasses import replace

    root = _make_bundle(tmp_path_factory.mktemp("bundle-block"))
    b = ReferenceBackend(read_bundle(root), replace(default_settings(root), verify="block"))
    yield b
    b.shutdown()


def test_block_verification_serves_sampled_and_greedy(block_backend):
    assert block_backend.pipeline.spec.verify == "block"
    requests = [GenerationRequest(PROMPTS[i], NEW_TOKENS, temperature=0.9 if i % 2 else 0.0, seed=100 + i,
                                  stream=i % 4 == 1) for i in range(8)]
    chunks = _run(block_backend, requests)
    texts = [_text(cs) for cs in chunks]
    assert texts == _engine_texts(block_backend.pipeline, requests)
    for r, text in zip(requests, texts):
        if r.temperature == 0:
            assert text == block_backend.pipeline.generate([r.prompt], max_new_tokens=NEW_TOKENS)[0].text
    assert sum(cs[-1].accepted_draft_tokens for cs in chunks) > 0


def test_draft_len_zero_serves_without_speculation(tmp_path):
    from dataclasses import replace

    root = _make_bundle(tmp_path / "bundle")
    b = ReferenceBackend(read_bundle(root), replace(default_settings(root), draft_len=0))
    try:
        assert b.pipeline.drafter.name == "none" and b.pipeline.spec.max_depth == 0
        chunks = _run(b, [GenerationRequest(PROMPTS[2], NEW_TOKENS)])[0]
        assert chunks[-1].draft_tokens == 0
        assert _text(chunks) == b.pipeline.generate([PROMPTS[2]], max_new_tokens=NEW_TOKENS)[0].text
    finally:
        b.shutdown()


# -- metrics -----------------------------------------------------------------------------------------
class _PromClient:
    """SpecMetrics' ``make`` on a prometheus_client registry (the library vLLM exports with)."""

    def __init__(self):
        import prometheus_client

        self.lib, self.registry, self.families = prometheus_client, prometheus_client.CollectorRegistry(), {}

    def __call__(self, kind, name, description, labels, buckets):
        family = self.families.get(name)
        if family is None:
            cls = {"counter": self.lib.Counter, "gauge": self.lib.Gauge, "histogram": self.lib.Histogram}[kind]
            kw = {"buckets": buckets} if buckets is not None else {}
            family = self.families[name] = cls(name, description, sorted(labels), registry=self.registry, **kw)
        metric = family.labels(**labels)
        if kind == "counter":
            metric.increment = metric.inc
        return metric

    def text(self) -> str:
        return self.lib.generate_latest(self.registry).decode()


def test_step_metrics_equal_the_requests_stats(tmp_path):
    from trtspec.bench.prometheus import parse_metrics
    from trtspec.triton.metrics import SpecMetrics

    root = _make_bundle(tmp_path / "bundle")
    prom = _PromClient()
    b = ReferenceBackend(read_bundle(root), default_settings(root), SpecMetrics(prom, "m", max_draft_len=3))
    try:
        before = parse_metrics(prom.text(), "trtspec", labels={"model": "m"})
        assert (before.num_drafts, before.draft_tokens, before.accepted_tokens) == (0, 0, 0)
        requests = [GenerationRequest(PROMPTS[i], NEW_TOKENS, temperature=0.7 if i % 3 == 0 else 0.0, seed=i)
                    for i in range(10)]
        chunks = _run(b, requests)
    finally:
        b.shutdown()
    stats = [cs[-1] for cs in chunks]
    got = parse_metrics(prom.text(), "trtspec", labels={"model": "m"})
    assert got.draft_tokens == sum(c.draft_tokens for c in stats)
    assert got.accepted_tokens == sum(c.accepted_draft_tokens for c in stats)
    # per-position counts are non-increasing and sum to the accepted tokens
    per_pos = [got.accepted_per_pos[k] for k in sorted(got.accepted_per_pos)]
    assert sum(per_pos) == got.accepted_tokens and per_pos == sorted(per_pos, reverse=True)
    text = prom.text()
    by_al = {int(line.split('acceptance_length="')[1].split('"')[0]): float(line.split()[-1])
             for line in text.splitlines() if line.startswith("trtspec_spec_decode_num_drafts_by_acceptance_length_total")}
    assert sorted(by_al) == [1, 2, 3, 4]                                   # AL 1..D+1
    assert sum(by_al.values()) == got.num_drafts                           # one count per draft
    assert sum(al * n for al, n in by_al.items()) == got.num_drafts + got.accepted_tokens   # mean AL = 1 + acc/drafts
    # a draft that accepted k tokens also accepted positions 0..k-1
    assert per_pos[0] == sum(n for al, n in by_al.items() if al >= 2) and per_pos[2] == by_al[4]
    assert 'trtspec_requests_total{model="m",outcome="success"} 10.0' in text
    assert "trtspec_num_requests_running{model=\"m\"} 0.0" in text
    assert parse_metrics(text, "trtspec", labels={"model": "m"}).num_drafts == got.num_drafts
    with pytest.raises(Exception, match="labels"):
        parse_metrics(text, "trtspec", labels={"model": "other"})


# -- the TensorRT-LLM glue, against a stand-in `tensorrt_llm` module (the real one needs a GPU) ------
def _fake_tensorrt_llm(texts: list[str], fail: bool = False):
    import types
    from types import SimpleNamespace as NS

    mod = types.ModuleType("tensorrt_llm")
    created = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    def output(text, finished):
        spec = NS(total_accepted_draft_tokens=5, total_draft_tokens=9)
        return NS(outputs=[NS(text=text, token_ids=list(range(len(text))),
                              request_perf_metrics=NS(speculative_decoding=spec))], finished=finished)

    class Promise:
        def __init__(self):
            self.steps = [output(t, i == len(texts) - 1) for i, t in enumerate(texts)]

        def __aiter__(self):
            async def gen():
                for s in self.steps:
                    if fail:
                        raise RuntimeError("device lost")
                    yield s
            return gen()

        async def aresult(self):
            if fail:
                raise RuntimeError("device lost")
            return self.steps[-1]

    class LLM:
        def __init__(self, model, **kw):
            created.update(model=model, **kw)

        def generate_async(self, prompt, params, streaming=False):
            created.setdefault("params", []).append((prompt, params.kw, streaming))
            return Promise()

        def shutdown(self):
            created["shutdown"] = True

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod, created


def test_trtllm_backend_glue(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    from trtspec.triton.backends import TrtllmBackend
    from trtspec.triton.bundle import BundleLayout
    from trtspec.triton.protocol import ModelSettings

    mod, created = _fake_tensorrt_llm(["de", "def f", "def f():"])
    monkeypatch.setitem(sys.modules, "tensorrt_llm", mod)
    layout = BundleLayout(root=tmp_path, target=tmp_path / "target", draft=tmp_path / "draft", drafter="draft_model",
                          draft_len=3, llm_api={"speculative_config": {"decoding_type": "Draft_Target",
                                                                        "max_draft_len": 3, "speculative_model": "draft"}})
    backend = TrtllmBackend(layout, ModelSettings(bundle=Path(tmp_path)))
    assert created["model"] == str(tmp_path / "target")
    assert created["speculative_config"]["speculative_model"] == str(tmp_path / "draft")
    streamed = _run(backend, [GenerationRequest("p", 8, stream=True, perf_metrics=True)])[0]
    assert [c.text for c in streamed] == ["de", "f f", "():"] and streamed[-1].final
    assert (streamed[-1].accepted_draft_tokens, streamed[-1].draft_tokens) == (5, 9)
    single = _run(backend, [GenerationRequest("p", 8, temperature=0.5, top_k=4, seed=3)])[0]
    assert [(c.text, c.final) for c in single] == [("def f():", True)]
    assert created["params"][-1] == ("p", {"max_tokens": 8, "temperature": 0.5, "top_k": 4, "seed": 3,
                                           "return_perf_metrics": True}, False)
    backend.shutdown()
    assert created["shutdown"]

    mod, created = _fake_tensorrt_llm(["x"], fail=True)
    monkeypatch.setitem(sys.modules, "tensorrt_llm", mod)
    failing = TrtllmBackend(layout, ModelSettings(bundle=Path(tmp_path)))
    chunks = _run(failing, [GenerationRequest("p", 8, stream=True), GenerationRequest("q", 8)])
    assert all(cs[-1].error == "generation failed: RuntimeError: device lost" for cs in chunks)
    failing.shutdown()


#: Fields of tensorrt_llm.SamplingParams (NVIDIA/TensorRT-LLM@000a01de66f0eab4ab05640711f0253f50f5209c:
#: tensorrt_llm/sampling_params.py) that the mapping may use.
TRTLLM_SAMPLING_FIELDS = {"end_id", "pad_id", "max_tokens", "stop_token_ids", "top_k", "top_p", "seed", "temperature",
                          "min_tokens", "return_perf_metrics", "ignore_eos", "n", "best_of"}


@pytest.mark.parametrize("request_, expected", [
    (GenerationRequest("p", 8), {"max_tokens": 8, "temperature": 0.0, "return_perf_metrics": True}),
    # greedy ignores the sampling knobs (TensorRT-LLM's None defaults would mean temperature 1.0)
    (GenerationRequest("p", 8, top_k=5, top_p=0.5, seed=9),
     {"max_tokens": 8, "temperature": 0.0, "return_perf_metrics": True}),
    (GenerationRequest("p", 16, temperature=0.7, top_p=0.9, top_k=40, seed=2**64 - 1),
     {"max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 2**64 - 1,
      "return_perf_metrics": True}),
    (GenerationRequest("p", 4, temperature=1.0),
     {"max_tokens": 4, "temperature": 1.0, "return_perf_metrics": True}),
])
def test_trtllm_sampling_kwargs_use_tensorrt_llm_field_names(request_, expected):
    from trtspec.triton.backends import trtllm_sampling_kwargs

    kw = trtllm_sampling_kwargs(request_)
    assert kw == pytest.approx(expected) and set(kw) <= TRTLLM_SAMPLING_FIELDS


def test_quantized_target_bundle_serves_what_the_runtime_generates(tmp_path):
    """A bundle whose target is a Model-Optimizer FP8 export (what `trtspec build` makes by default)
    serves on the trtspec runtime: greedy and seeded sampled texts equal the runtime's own on that
    checkpoint, which the runtime loads dequantized."""
    pytest.importorskip("modelopt.torch.quantization")
    import shutil

    from test_runtime_quant import quantize_export

    root = _make_bundle(tmp_path / "bundle")
    shutil.move(root / "target", tmp_path / "source")
    quantize_export(tmp_path / "source", root / "target", "FP8_DEFAULT_CFG")
    b = ReferenceBackend(read_bundle(root), default_settings(root))
    try:
        assert b.pipeline.target.quant is not None and b.pipeline.target.quant.algo == "FP8"
        requests = [GenerationRequest(PROMPTS[0], NEW_TOKENS),
                    GenerationRequest(PROMPTS[1], NEW_TOKENS, temperature=0.9, seed=5, stream=True)]
        texts = [_text(cs) for cs in _run(b, requests)]
        assert texts == _engine_texts(b.pipeline, requests)
        assert texts[0] == b.pipeline.generate([PROMPTS[0]], max_new_tokens=NEW_TOKENS)[0].text
    finally:
        b.shutdown()
