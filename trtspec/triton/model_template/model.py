"""Triton Python-backend model serving a trtspec bundle (copied into repositories by ``trtspec triton``).

At load it reads ``<version>/model.yaml`` (:class:`trtspec.triton.protocol.ModelSettings`), then
serves the bundle through ``tensorrt_llm.LLM`` when TensorRT-LLM is importable and a GPU is
visible, else through the trtspec runtime with continuous batching, and logs which and why.

Decoupled: each request gets its responses from a backend thread through its response sender,
one per new piece of text when ``stream`` is true, else a single one. A bad request gets a
``TritonError`` response for that request only. Speculative-decoding metrics
(:mod:`trtspec.triton.metrics`) join Triton's Prometheus ``/metrics`` through ``pb_utils.MetricFamily``.
"""
import json
import logging
from functools import partial
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from trtspec.triton.backends import load_backend, speculation
from trtspec.triton.bundle import read_bundle
from trtspec.triton.metrics import NoMetrics, SpecMetrics
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


def _metrics(model_name, max_draft_len):
    """SpecMetrics on ``pb_utils.MetricFamily`` (NoMetrics where this Triton lacks the metrics API)."""
    if not hasattr(pb_utils, "MetricFamily"):
        return NoMetrics()
    kinds = {"counter": pb_utils.MetricFamily.COUNTER, "gauge": pb_utils.MetricFamily.GAUGE,
             "histogram": pb_utils.MetricFamily.HISTOGRAM}
    families = {}

    def make(kind, name, description, labels, buckets):
        family = families.get(name)
        if family is None:
            family = families[name] = pb_utils.MetricFamily(name=name, description=description, kind=kinds[kind])
        return family.Metric(labels=labels) if buckets is None else family.Metric(labels=labels, buckets=buckets)

    return SpecMetrics(make, model_name, max_draft_len)


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
        draft_len, schedule = speculation(bundle, self.settings)
        self.metrics = _metrics(args["model_name"], max([draft_len, *(schedule or {}).values()]))
        self.backend, _ = load_backend(bundle, self.settings, self.metrics)

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
                self._refuse(sender, str(e))
            except Exception as e:  # an unexpected failure still ends only this request
                self.log.exception("request failed")
                self._refuse(sender, f"{type(e).__name__}: {e}")
        return None

    def _shape(self):
        return (1, 1) if self.batched else (1,)

    def _refuse(self, sender, message):
        """A request refused before it reached the backend (which counts the others' outcomes)."""
        self.metrics.finished("failure")
        self.metrics.flush()
        self._fail(sender, message)

    @staticmethod
    def _fail(sender, message):
        sender.send(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(message)), flags=_FINAL)

    def _respond(self, sender, perf_metrics, chunk):
        """Send one chunk (called from a backend thread)."""
        if chunk.error is not None:
            self._fail(sender, chunk.error)
            return
        shape = self._shape()
        tensors = [pb_utils.Tensor("text_output", np.array([chunk.text.encode("utf-8")], dtype=np.object_).reshape(shape))]
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
