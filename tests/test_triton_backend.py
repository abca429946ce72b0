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
    with pytest.raises(RequestError, match="sampling_param_temperature: this model verifies greedily"):
        backend.submit(GenerationRequest("x", 4, temperature=0.5), lambda c: None)


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
    single = _run(backend, [GenerationRequest("p", 8, top_k=4)])[0]
    assert [(c.text, c.final) for c in single] == [("def f():", True)]
    assert created["params"][-1] == ("p", {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0, "top_k": 4, "seed": 0,
                                           "return_perf_metrics": False}, False)
    backend.shutdown()
    assert created["shutdown"]

    mod, created = _fake_tensorrt_llm(["x"], fail=True)
    monkeypatch.setitem(sys.modules, "tensorrt_llm", mod)
    failing = TrtllmBackend(layout, ModelSettings(bundle=Path(tmp_path)))
    chunks = _run(failing, [GenerationRequest("p", 8, stream=True), GenerationRequest("q", 8)])
    assert all(cs[-1].error == "generation failed: RuntimeError: device lost" for cs in chunks)
    failing.shutdown()


def test_quantized_bundle_is_refused_with_a_way_out(tmp_path):
    import json

    from trtspec.triton.bundle import BundleError, BundleLayout
    from trtspec.triton.protocol import ModelSettings

    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}}))
    layout = BundleLayout(root=tmp_path, target=tmp_path / "target", draft=None, drafter="ngram", draft_len=3)
    with pytest.raises(BundleError, match=r"target checkpoint .* is quantized \(FP8\).*--quant none"):
        ReferenceBackend(layout, ModelSettings(bundle=tmp_path))
