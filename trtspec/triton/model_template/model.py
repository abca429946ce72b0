"""Triton Python-backend model serving a trtspec bundle (copied into repositories by ``trtspec triton``).

At load it reads ``<version>/model.yaml`` (:class:`trtspec.triton.protocol.ModelSettings`), then
serves the bundle through ``tensorrt_llm.LLM`` when TensorRT-LLM is importable and a GPU is
visible, else through the trtspec runtime with continuous batching, and logs which and why.

Decoupled: each request gets its responses from a backend thread through its response sender,
one per new piece of text when ``stream`` is true, else a single one. A bad request gets a
``TritonError`` response for that request only. Counters of requests, generated, drafted and
accepted tokens join Triton's Prometheus ``/metrics`` (:data:`METRICS`).
"""
import json
import logging
from functools import partial
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from trtspec.triton.backends import load_backend
from trtspec.triton.bundle import read_bundle
from trtspec.triton.protocol import INPUTS, ModelSettings, RequestError, parse_request

_FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class _TritonLog(logging.Handler):
    """Route the ``trtspec`` logger into Triton's log."""

    def emit(self, record):
        message = self.format(record)
        if record.levelno >= logging.ERROR:
            pb_utils.Logger.log_error(message)
        elif record.levelno >= logging.WARNING:
            pb_utils.Logger.log_warn(message)
        else:
            pb_utils.Logger.log_info(message)


#: Prometheus counters this model adds to Triton's /metrics (name -> help).
METRICS = {
    "trtspec_requests_total": "Requests finished, by outcome (success | failure | cancelled)",
    "trtspec_output_tokens_total": "Generated tokens of successful requests",
    "trtspec_draft_tokens_total": "Draft tokens proposed for successful requests",
    "trtspec_accepted_draft_tokens_total": "Draft tokens accepted for successful requests",
}


class _Counters:
    """The METRICS counters for one model (no-ops where this Triton lacks the metrics API)."""

    def __init__(self, model_name):
        self.metrics = {}
        if not hasattr(pb_utils, "MetricFamily"):
            return
        self._families = {name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.COUNTER)
                          for name, text in METRICS.items()}
        labels = {"model": model_name}
        for name, family in self._families.items():
            if name == "trtspec_requests_total":
                for outcome in ("success", "failure", "cancelled"):
                    self.metrics[(name, outcome)] = family.Metric(labels=dict(labels, outcome=outcome))
            else:
                self.metrics[(name, None)] = family.Metric(labels=labels)

    def add(self, name, value, outcome=None):
        metric = self.metrics.get((name, outcome))
        if metric is not None and value:
            metric.increment(value)


class TritonPythonModel:
    def initialize(self, args):
        logger = logging.getLogger("trtspec")
        if not any(isinstance(h, _TritonLog) for h in logger.handlers):
            logger.addHandler(_TritonLog())
        logger.setLevel(logging.INFO)
        self.log = logger
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "this model streams: config.pbtxt needs model_transaction_policy { decoupled: true }")
        self.batched = int(config.get("max_batch_size", 0)) > 0
        version_dir = Path(args["model_repository"]) / args["model_version"]
        self.settings = ModelSettings.load(version_dir / "model.yaml")
        bundle = read_bundle(self.settings.bundle)
        self.backend, _ = load_backend(bundle, self.settings)
        self.counters = _Counters(args["model_name"])

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                inputs = {}
                for name, _, _ in INPUTS:
                    tensor = pb_utils.get_input_tensor_by_name(request, name)
                    if tensor is not None:
                        inputs[name] = tensor.as_numpy()
                parsed = parse_request(inputs, self.settings)
                self.backend.submit(parsed, partial(self._respond, sender, parsed.perf_metrics),
                                    cancelled=getattr(request, "is_cancelled", None))
            except RequestError as e:
                self._fail(sender, str(e))
            except Exception as e:  # an unexpected failure still ends only this request
                self.log.exception("request failed")
                self._fail(sender, f"{type(e).__name__}: {e}")
        return None

    def _shape(self):
        return (1, 1) if self.batched else (1,)

    def _fail(self, sender, message, outcome="failure"):
        self.counters.add("trtspec_requests_total", 1, outcome)
        sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message)), flags=_FINAL)

    def _respond(self, sender, perf_metrics, chunk):
        """Send one chunk (called from a backend thread)."""
        if chunk.error is not None:
            self._fail(sender, chunk.error, "cancelled" if chunk.cancelled else "failure")
            return
        shape = self._shape()
        tensors = [pb_utils.Tensor("text_output", np.array([chunk.text.encode("utf-8")], dtype=np.object_).reshape(shape))]
        if chunk.final:
            self.counters.add("trtspec_requests_total", 1, "success")
            self.counters.add("trtspec_output_tokens_total", chunk.output_tokens)
            self.counters.add("trtspec_draft_tokens_total", chunk.draft_tokens)
            self.counters.add("trtspec_accepted_draft_tokens_total", chunk.accepted_draft_tokens)
        if chunk.final and perf_metrics:
            tensors += [
                pb_utils.Tensor("acceptance_rate", np.full(shape, chunk.acceptance_rate, dtype=np.float32)),
                pb_utils.Tensor("total_accepted_draft_tokens", np.full(shape, chunk.accepted_draft_tokens, dtype=np.int32)),
                pb_utils.Tensor("total_draft_tokens", np.full(shape, chunk.draft_tokens, dtype=np.int32)),
            ]
        sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=_FINAL if chunk.final else 0)

    def finalize(self):
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.shutdown()
