"""Speculative-decoding metrics of the trtspec Triton model, for Triton's Prometheus ``/metrics``.

Names follow vLLM's (``vllm:spec_decode_num_drafts`` ... in ``vllm/v1/spec_decode/metrics.py``)
and TensorRT-LLM's (``trtllm_spec_decode_num_draft_tokens`` / ``..._num_accepted_tokens``) with the
prefix ``trtspec_``; the names below are those of the exposition text (counters end in ``_total``,
as prometheus_client writes vLLM's). A *request-step* is one target step of one request; a *draft*
is a request-step that proposed >= 1 token.

=================================================================  =========  ===========================================
metric                                                             kind       counts
=================================================================  =========  ===========================================
``trtspec_spec_decode_num_steps_total``                            counter    request-steps (D = 0 steps included)
``trtspec_spec_decode_num_drafts_total``                           counter    drafts (vLLM's ``num_drafts``)
``trtspec_spec_decode_num_draft_tokens_total``                     counter    tokens proposed
``trtspec_spec_decode_num_accepted_tokens_total``                  counter    draft tokens accepted
``trtspec_spec_decode_num_accepted_tokens_per_pos_total``          counter    drafts that accepted draft position
                                                                              ``position`` (label, 0-based)
``trtspec_spec_decode_num_drafts_by_acceptance_length_total``      counter    the AL histogram: drafts whose AL (bonus
                                                                              included) was ``acceptance_length`` (label,
                                                                              1..D+1)
``trtspec_spec_decode_step_latency_seconds``                       histogram  wall time of each engine step
``trtspec_spec_decode_draft_len``                                  histogram  the draft length each engine step chose
                                                                              (its longest chain; buckets 0..max_draft_len)
``trtspec_num_requests_running``                                   gauge      requests in the batch
``trtspec_requests_total``                                         counter    finished requests, label ``outcome``
                                                                              (success, failure, cancelled)
``trtspec_generation_tokens_total``                                counter    tokens generated (vLLM's name)
=================================================================  =========  ===========================================

Every metric has the label ``model``. Mean AL over a window = ``1 + Δaccepted / Δdrafts``;
per-position acceptance ``a_k`` = ``Δper_pos[k] / Δper_pos[k-1]`` (``Δdrafts`` for k = 0). With
the TensorRT-LLM engine only the token counters move (its per-request perf metrics give totals, not
steps). The AL histogram is a counter per AL value rather than a Prometheus histogram because
``pb_utils`` histograms take one call per observation (about 65 µs each through the stub's IPC,
measured under load on the CPU machine), i.e. one per request per step. For the same reason the
draft-length histogram takes one observation per engine step: the depth the step drafted (with
adaptive speculation, the controller's choice for the batch; a request capped by its token budget
drafts less, which ``num_draft_tokens`` counts), so it costs what the step-latency histogram does.

:class:`SpecMetrics` accumulates events in memory (cheap, any thread) and pushes them on
:meth:`SpecMetrics.flush`, through ``make(kind, name, description, labels, buckets)``, which
returns an object with ``increment(v)`` (counter), ``set(v)`` (gauge) or ``observe(v)``
(histogram): the model passes one built on ``pb_utils.MetricFamily``. The backend flushes when its
batch empties (so a lone request's metrics are current once its response is out) and otherwise at
most every ``interval_s``.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any, Callable, Sequence

PREFIX = "trtspec_spec_decode_"
#: (kind, name, description) of every metric family, in export order.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("counter", PREFIX + "num_steps_total", "Target steps summed over requests (steps without drafts included)"),
    ("counter", PREFIX + "num_drafts_total", "Request-steps that proposed at least one draft token"),
    ("counter", PREFIX + "num_draft_tokens_total", "Draft tokens proposed"),
    ("counter", PREFIX + "num_accepted_tokens_total", "Draft tokens accepted"),
    ("counter", PREFIX + "num_accepted_tokens_per_pos_total",
     "Drafts that accepted the token at draft position `position` (0-based)"),
    ("counter", PREFIX + "num_drafts_by_acceptance_length_total",
     "Drafts whose acceptance length (bonus token included) was `acceptance_length`"),
    ("histogram", PREFIX + "step_latency_seconds", "Wall time of one engine step, in seconds"),
    ("histogram", PREFIX + "draft_len", "Draft length chosen by each engine step (its longest chain)"),
    ("gauge", "trtspec_num_requests_running", "Requests in the running batch"),
    ("counter", "trtspec_requests_total", "Finished requests by outcome (success | failure | cancelled)"),
    ("counter", "trtspec_generation_tokens_total", "Tokens generated"),
)
OUTCOMES = ("success", "failure", "cancelled")
#: Step-latency bucket bounds, in seconds.
LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
PER_POS = PREFIX + "num_accepted_tokens_per_pos_total"
BY_AL = PREFIX + "num_drafts_by_acceptance_length_total"
LATENCY = PREFIX + "step_latency_seconds"
DRAFT_LEN = PREFIX + "draft_len"
RUNNING = "trtspec_num_requests_running"

Make = Callable[[str, str, str, dict, Sequence[float] | None], Any]


class SpecMetrics:
    """The families of :data:`FAMILIES` for one model; safe to call from any thread.

    Args:
        make: builds one metric (see module docstring).
        model: value of the ``model`` label.
        max_draft_len: the deepest draft the engine can propose (AL values 1..max_draft_len+1).
        interval_s: :meth:`flush` with ``if_due=True`` pushes at most this often. Default 0.25 s.
    """

    def __init__(self, make: Make, model: str, max_draft_len: int, interval_s: float = 0.25) -> None:
        if max_draft_len < 0:
            raise ValueError(f"max_draft_len: expected >= 0, got {max_draft_len}")
        if interval_s < 0:
            raise ValueError(f"interval_s: expected >= 0, got {interval_s}")
        self._make, self._labels = make, {"model": model}
        self._desc = {name: (kind, text) for kind, name, text in FAMILIES}
        self._lock = threading.Lock()
        self._metrics: dict[tuple, Any] = {}
        self._counts: dict[tuple, float] = defaultdict(float)     # pending counter increments
        self._latencies: list[float] = []                         # pending step-latency observations
        self._depths: list[int] = []                              # pending draft-length observations
        self._running: int | None = None                          # pending gauge value
        self.max_draft_len, self.interval_s = max_draft_len, interval_s
        self._last_flush = time.monotonic()
        for kind, name, _ in FAMILIES:  # every family visible from the first scrape
            if name == "trtspec_requests_total":
                for outcome in OUTCOMES:
                    self._metric(name, outcome=outcome)
            elif name == PER_POS:
                for k in range(max_draft_len):
                    self._metric(name, position=str(k))
            elif name == BY_AL:
                for al in range(1, max_draft_len + 2):
                    self._metric(name, acceptance_length=str(al))
            else:
                self._metric(name)

    def _metric(self, name: str, **labels: str):
        key = (name, tuple(sorted(labels.items())))
        metric = self._metrics.get(key)
        if metric is None:
            kind, text = self._desc[name]
            buckets = {LATENCY: list(LATENCY_BUCKETS), DRAFT_LEN: [float(d) for d in range(self.max_draft_len + 1)]
                       }.get(name)
            metric = self._metrics[key] = self._make(kind, name, text, dict(self._labels, **labels), buckets)
        return metric

    def _add(self, name: str, value: float, **labels: str) -> None:
        if value:
            self._counts[(name, tuple(sorted(labels.items())))] += value

    # -- events (cheap: memory only) --------------------------------------------------------------
    def record_step(self, latency_s: float, steps: Sequence[tuple[int, int]]) -> None:
        """One engine step: its wall time and ``(draft_tokens, accepted)`` of each request in it."""
        drafts = [(d, a) for d, a in steps if d > 0]
        with self._lock:
            self._latencies.append(latency_s)
            self._depths.append(max((d for d, _ in steps), default=0))
            self._add(PREFIX + "num_steps_total", len(steps))
            self._add(PREFIX + "num_drafts_total", len(drafts))
            self._add(PREFIX + "num_draft_tokens_total", sum(d for d, _ in drafts))
            self._add(PREFIX + "num_accepted_tokens_total", sum(a for _, a in drafts))
            for _, a in drafts:
                self._add(BY_AL, 1, acceptance_length=str(a + 1))
                for k in range(a):
                    self._add(PER_POS, 1, position=str(k))

    def record_totals(self, draft_tokens: int, accepted_tokens: int) -> None:
        """A finished request's totals, for engines that report no steps (TensorRT-LLM)."""
        with self._lock:
            self._add(PREFIX + "num_draft_tokens_total", draft_tokens)
            self._add(PREFIX + "num_accepted_tokens_total", accepted_tokens)

    def running(self, n: int) -> None:
        with self._lock:
            self._running = n

    def finished(self, outcome: str, generated_tokens: int = 0) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome: expected one of {OUTCOMES}, got {outcome!r}")
        with self._lock:
            self._add("trtspec_requests_total", 1, outcome=outcome)
            self._add("trtspec_generation_tokens_total", generated_tokens)

    # -- pushing ------------------------------------------------------------------------------------
    def flush(self, if_due: bool = False) -> None:
        """Push what accumulated since the last flush (only after ``interval_s`` when ``if_due``)."""
        with self._lock:
            now = time.monotonic()
            if if_due and now - self._last_flush < self.interval_s:
                return
            self._last_flush = now
            counts, self._counts = self._counts, defaultdict(float)
            latencies, self._latencies = self._latencies, []
            depths, self._depths = self._depths, []
            running, self._running = self._running, None
            for (name, labels), value in counts.items():
                self._metric(name, **dict(labels)).increment(value)
            latency = self._metric(LATENCY)
            for x in latencies:
                latency.observe(x)
            draft_len = self._metric(DRAFT_LEN)
            for d in depths:
                draft_len.observe(float(d))
            if running is not None:
                self._metric(RUNNING).set(running)


class NoMetrics:
    """Stands in where no metrics endpoint exists (in-process use): every event is dropped."""

    def record_step(self, latency_s: float, steps) -> None:
        pass

    def record_totals(self, draft_tokens: int, accepted_tokens: int) -> None:
        pass

    def running(self, n: int) -> None:
        pass

    def finished(self, outcome: str, generated_tokens: int = 0) -> None:
        pass

    def flush(self, if_due: bool = False) -> None:
        pass
