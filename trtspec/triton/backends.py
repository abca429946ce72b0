"""Generation backends of the trtspec Triton model.

* :class:`ReferenceBackend`: the trtspec runtime with continuous batching. One background thread
  owns the engine (``Pipeline.engine()``): it admits queued requests (``add_request``), calls
  ``step()`` while there is work, and hands each request's new tokens to that request's callback.
* :class:`TrtllmBackend`: ``tensorrt_llm.LLM`` built from the bundle's ``llm_api.yaml`` (GPU).

Both take a validated :class:`~trtspec.triton.protocol.GenerationRequest`, a callback
``emit(Chunk)`` that is called from a backend thread (pieces of text while streaming, then exactly
one chunk with ``final=True``, carrying an ``error`` when the request failed) and optionally
``cancelled() -> bool`` (the client went away: the request is dropped from the batch). A failure
of one request never stops the backend. Both report to a :class:`~trtspec.triton.metrics.SpecMetrics`
(the trtspec runtime per engine step, TensorRT-LLM per finished request).

Sampling (temperature / top-k / top-p / seed) is served by both: the trtspec runtime verifies a
step holding a sampled request losslessly (``verify_sample`` for chains and trees, or block
verification with ``verify: block``), each sampled request with its own random stream, so a seeded
request gives the same text alone or in any batch; TensorRT-LLM gets the same fields through
:func:`trtllm_sampling_kwargs`.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

from trtspec.triton.bundle import BundleLayout
from trtspec.triton.metrics import NoMetrics
from trtspec.triton.protocol import Chunk, GenerationRequest, IncrementalText, ModelSettings, RequestError

Emit = Callable[[Chunk], None]
log = logging.getLogger("trtspec.triton")


def choose_backend(settings: ModelSettings) -> tuple[str, str]:
    """``(backend, reason)``: ``tensorrt_llm`` when asked for, or on ``auto`` when importable with a GPU."""
    import importlib.util

    if settings.backend != "auto":
        return settings.backend, f"backend: {settings.backend} in model.yaml"
    if importlib.util.find_spec("tensorrt_llm") is None:
        return "trtspec", "tensorrt_llm is not installed"
    import torch

    if not torch.cuda.is_available():
        return "trtspec", "no CUDA GPU is visible"
    return "tensorrt_llm", f"tensorrt_llm is installed and {torch.cuda.device_count()} GPU(s) are visible"


def _stat(stats, *names: str) -> int:
    for name in names:
        value = getattr(stats, name, None) if not isinstance(stats, dict) else stats.get(name)
        if value is not None:
            return int(value)
    return 0


def speculation(bundle: BundleLayout, settings: ModelSettings) -> tuple[int, dict[int, int] | None]:
    """``(draft_len, draft_len_schedule)`` the trtspec runtime runs: the bundle's, unless
    ``settings.draft_len`` overrides it (0 = no speculation; n = a fixed D of n, schedule dropped)."""
    if settings.draft_len is None:
        return bundle.draft_len, bundle.draft_len_schedule or None
    return settings.draft_len, None


@dataclass
class _Active:
    request: GenerationRequest
    emit: Emit
    text: IncrementalText
    new_tokens: int = 0
    cancelled: Callable[[], bool] | None = None
    seen: tuple[int, int] = (0, 0)    # (draft_tokens, accepted_tokens) already reported to the metrics


class ReferenceBackend:
    """The trtspec runtime behind a continuous-batching loop (CPU or GPU torch)."""

    name = "trtspec"

    def __init__(self, bundle: BundleLayout, settings: ModelSettings, metrics=None) -> None:
        import torch

        from trtspec.runtime import load_pipeline

        device = settings.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device

        draft_len, schedule = speculation(bundle, settings)
        draft = str(bundle.draft) if bundle.draft is not None and (draft_len or schedule) else None
        drafter = bundle.drafter if draft is not None or bundle.drafter in ("ngram", "mtp") else "draft_model"
        kwargs = dict(drafter=drafter, draft_len=draft_len, device=device, verify=settings.verify)
        if schedule:
            kwargs["draft_len_schedule"] = schedule
        self.settings = settings
        self.metrics = metrics if metrics is not None else NoMetrics()
        self.pipeline = load_pipeline(str(bundle.target), draft, **kwargs)
        if settings.speculation == "adaptive" and self.pipeline.spec.max_depth > 0:
            from trtspec.bench.adaptive import adaptive_config

            cfg = adaptive_config(self.pipeline, drafter, cost_table=settings.cost_table, bundle=bundle.root,
                                  target=bundle.target, draft=None if draft is None else bundle.draft)
            self.pipeline = self.pipeline.with_speculation("adaptive", cfg)
        self.tokenizer = self.pipeline.tokenizer
        self.engine = self._new_engine()
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._queue: deque[tuple[str, list[int], _Active]] = deque()
        self._active: dict[str, _Active] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="trtspec-engine", daemon=True)
        self._thread.start()

    def _new_engine(self):
        context = self.pipeline.target.config.max_position_embeddings
        return self.pipeline.engine(max_batch_size=self.settings.max_active,
                                    max_seq_len=min(context, self.settings.max_prompt_tokens + self.settings.max_tokens_limit))

    # -- called from Triton's execute thread --------------------------------------------------
    def encode(self, text: str) -> list[int]:
        enc = self.tokenizer.encode(text)
        return list(getattr(enc, "ids", enc))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    #: Steps between polls of the requests' ``cancelled()`` (each poll asks the server).
    CANCEL_POLL_STEPS = 4

    def submit(self, request: GenerationRequest, emit: Emit,
               cancelled: Callable[[], bool] | None = None) -> None:
        """Queue a request; :class:`RequestError` (before queueing) for a prompt that is too long."""
        prompt_ids = self.encode(request.prompt)
        if not prompt_ids:
            raise RequestError("text_input: the prompt encodes to no tokens")
        if len(prompt_ids) > self.settings.max_prompt_tokens:
            raise RequestError(f"text_input: prompt of {len(prompt_ids)} tokens exceeds the limit of "
                               f"{self.settings.max_prompt_tokens} tokens")
        if len(prompt_ids) + request.max_tokens > self.engine.max_seq_len:
            raise RequestError(f"sampling_param_max_tokens: {request.max_tokens} new tokens after a prompt of "
                               f"{len(prompt_ids)} tokens exceed the context of {self.engine.max_seq_len} tokens")
        rid = f"r{next(self._ids)}"
        with self._cond:
            if self._stopping:
                raise RuntimeError("the model is shutting down")
            self._queue.append((rid, prompt_ids, _Active(request, emit, IncrementalText(self.decode),
                                                         cancelled=cancelled)))
            self._cond.notify()

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)
        for rid, _, active in list(self._queue):
            self._finish_error(active, "the model was unloaded before this request ran")
        for active in list(self._active.values()):
            self._finish_error(active, "the model was unloaded while this request ran")
        self.metrics.flush()

    # -- the engine thread ----------------------------------------------------------------------
    def _params(self, r: GenerationRequest):
        """The runtime's ``SamplingParams`` (with the pipeline's stop tokens); ``seed`` None lets the
        engine derive one from its arrival index."""
        return self.pipeline.params(max_new_tokens=r.max_tokens, temperature=r.temperature, top_k=r.top_k,
                                    top_p=r.top_p, seed=r.seed)

    @staticmethod
    def _send(active: _Active, chunk: Chunk) -> None:
        try:
            active.emit(chunk)
        except Exception:  # a client that went away must not stop the engine
            log.exception("sending a response failed")

    def _finish_error(self, active: _Active, message: str) -> None:
        self.metrics.finished("failure", active.new_tokens)
        self._send(active, Chunk(text="", final=True, error=message))

    def _admit(self) -> None:
        while self._queue and len(self._active) < self.settings.max_active:
            rid, prompt_ids, active = self._queue.popleft()
            try:
                self.engine.add_request(rid, prompt_ids, self._params(active.request))
            except Exception as e:
                log.exception("add_request failed")
                self._finish_error(active, f"request rejected by the engine: {e}")
                continue
            self._active[rid] = active

    def _drop_cancelled(self) -> None:
        for rid, active in list(self._active.items()):
            try:
                gone = active.cancelled is not None and active.cancelled()
            except Exception:
                log.exception("cancellation check failed")
                gone = False
            if gone:
                self.engine.abort(rid)
                del self._active[rid]
                self.metrics.finished("cancelled", active.new_tokens)
                self._send(active, Chunk(text="", final=True, error="request cancelled by the client", cancelled=True))

    def _loop(self) -> None:
        import time

        steps = 0
        while True:
            with self._cond:
                while not self._stopping and not self._queue and not self._active:
                    self._cond.wait()
                if self._stopping:
                    return
                self._admit()
            if steps % self.CANCEL_POLL_STEPS == 0:
                self._drop_cancelled()
            if not self._active:
                self.metrics.running(0)
                self.metrics.flush()
                continue
            steps += 1
            t0 = time.perf_counter()
            try:
                outputs = self.engine.step()
            except Exception as e:  # fail the batch, keep serving with a fresh engine
                log.exception("engine step failed")
                failed, self._active = self._active, {}
                for active in failed.values():
                    self._finish_error(active, f"generation failed: {type(e).__name__}: {e}")
                self.engine = self._new_engine()
                self.metrics.running(0)
                self.metrics.flush()
                continue
            self._account(outputs, time.perf_counter() - t0)
            for out in outputs:
                active = self._active.get(out.request_id)
                if active is None:
                    continue
                self._deliver(out, active)

    def _account(self, outputs, latency_s: float) -> None:
        """Record the step in the metrics before any response of it goes out; flush them when the
        batch empties (so they are current once the last response is out), else when due."""
        counts = [self._step_counts(o) for o in outputs]
        self.metrics.record_step(latency_s, [c for c in counts if c is not None])
        done = [(o, self._active[o.request_id]) for o in outputs if o.finished and o.request_id in self._active]
        for out, active in done:
            self.metrics.finished("success", active.new_tokens + len(out.new_token_ids))
        remaining = len(self._active) - len(done)
        self.metrics.running(remaining)
        self.metrics.flush(if_due=remaining > 0)

    def _step_counts(self, out) -> tuple[int, int] | None:
        """``(draft_tokens, accepted)`` of this step for ``out``'s request (its stats are cumulative);
        None for a request no longer served."""
        now = (_stat(out.stats, "draft_tokens"), _stat(out.stats, "accepted_tokens"))
        active = self._active.get(out.request_id)
        if active is None:
            return None
        before, active.seen = active.seen, now
        return now[0] - before[0], now[1] - before[1]

    def _deliver(self, out, active: _Active) -> None:
        new_ids = list(out.new_token_ids)
        active.new_tokens += len(new_ids)
        piece = active.text.push(new_ids)
        if not out.finished:
            if active.request.stream and piece:
                self._send(active, Chunk(text=piece, final=False))
            return
        del self._active[out.request_id]
        rest = active.text.finish()
        self._send(active, Chunk(text=piece + rest if active.request.stream else active.text.emitted, final=True,
                                 accepted_draft_tokens=_stat(out.stats, "accepted_tokens", "accepted_draft_tokens"),
                                 draft_tokens=_stat(out.stats, "draft_tokens", "drafted_tokens"),
                                 output_tokens=active.new_tokens))


def trtllm_sampling_kwargs(r: GenerationRequest) -> dict:
    """Keyword arguments of ``tensorrt_llm.SamplingParams`` for one request.

    Field names are those of TensorRT-LLM's ``tensorrt_llm/sampling_params.py`` (``max_tokens``,
    ``temperature``, ``top_k``, ``top_p``, ``seed``, ``return_perf_metrics``). Its ``None`` means "the
    runtime default", which for ``temperature`` is 1.0, so greedy is sent as ``temperature=0.0``
    (TensorRT-LLM's greedy) and the sampling knobs only when they are set: ``top_k`` when > 0,
    ``top_p`` when < 1, ``seed`` when the request gave one. ``return_perf_metrics`` is always on: the
    metrics endpoint counts every request's draft and accepted tokens.
    """
    kw: dict = {"max_tokens": r.max_tokens, "temperature": float(r.temperature), "return_perf_metrics": True}
    if r.temperature > 0:
        if r.top_k > 0:
            kw["top_k"] = int(r.top_k)
        if r.top_p < 1.0:
            kw["top_p"] = float(r.top_p)
        if r.seed is not None:
            kw["seed"] = int(r.seed)
    return kw


class TrtllmBackend:
    """``tensorrt_llm.LLM(target, **llm_api.yaml)`` served through its asyncio API (GPU machines)."""

    name = "tensorrt_llm"

    def __init__(self, bundle: BundleLayout, settings: ModelSettings, metrics=None) -> None:
        import asyncio

        from tensorrt_llm import LLM

        options = dict(bundle.llm_api)
        spec = dict(options.get("speculative_config") or {})
        if bundle.draft is not None and spec:
            spec["speculative_model"] = str(bundle.draft)
            options["speculative_config"] = spec
        try:  # turn the YAML blocks into TensorRT-LLM's typed configs, as trtllm-serve --config does
            from tensorrt_llm.llmapi.llm_args import update_llm_args_with_extra_dict

            options = update_llm_args_with_extra_dict({"model": str(bundle.target)}, options)
            options.pop("model", None)
        except ImportError:
            pass
        self.settings = settings
        self.metrics = metrics if metrics is not None else NoMetrics()
        self.llm = LLM(model=str(bundle.target), **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trtllm-loop", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool] | None = None) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self._run(request, emit), self._loop)

    async def _run(self, r: GenerationRequest, emit: Emit) -> None:
        from tensorrt_llm import SamplingParams

        try:
            params = SamplingParams(**trtllm_sampling_kwargs(r))
            sent, output = "", None
            promise = self.llm.generate_async(r.prompt, params, streaming=r.stream)
            if r.stream:
                async for output in promise:
                    text = output.outputs[0].text
                    if not output.finished and len(text) > len(sent):
                        emit(Chunk(text=text[len(sent):], final=False))
                        sent = text
            else:
                output = await promise.aresult()
            text = output.outputs[0].text if output is not None else ""
            metrics = getattr(output.outputs[0], "request_perf_metrics", None) if output is not None else None
            spec = getattr(metrics, "speculative_decoding", None)
            drafted, accepted = _stat(spec, "total_draft_tokens"), _stat(spec, "total_accepted_draft_tokens")
            n_out = len(output.outputs[0].token_ids) if output is not None else 0
            self.metrics.record_totals(drafted, accepted)
            self.metrics.finished("success", n_out)
            self.metrics.flush()
            emit(Chunk(text=text[len(sent):] if r.stream else text, final=True, accepted_draft_tokens=accepted,
                       draft_tokens=drafted, output_tokens=n_out))
        except Exception as e:
            log.exception("tensorrt_llm request failed")
            self.metrics.finished("failure")
            self.metrics.flush()
            emit(Chunk(text="", final=True, error=f"generation failed: {type(e).__name__}: {e}"))

    def shutdown(self, timeout: float = 10.0) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self.llm.shutdown()


def load_backend(bundle: BundleLayout, settings: ModelSettings, metrics=None):
    """The backend :func:`choose_backend` picks, and the reason; logs the choice. ``metrics``: a
    :class:`~trtspec.triton.metrics.SpecMetrics`, or None for none."""
    name, reason = choose_backend(settings)
    if name == "tensorrt_llm":
        log.info("trtspec Triton model: serving %s with tensorrt_llm (%s)", bundle.root, reason)
        return TrtllmBackend(bundle, settings, metrics), reason
    backend = ReferenceBackend(bundle, settings, metrics)
    spec, quant = backend.pipeline.spec, getattr(backend.pipeline.target, "quant", None)
    log.info("trtspec Triton model: serving %s with trtspec (%s) on %s, drafter %s, draft_len %d%s, %s speculation, "
             "verify %s%s", bundle.root, reason, backend.device, backend.pipeline.drafter.name, spec.draft_len,
             f", schedule {dict(spec.draft_len_schedule)}" if spec.draft_len_schedule else "", spec.speculation,
             spec.verify,
             f", target {quant.algo} (dequantized at load, activations {quant.activations})" if quant else "")
    return backend, reason
