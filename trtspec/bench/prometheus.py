"""Speculative-decoding counters from a serving engine's Prometheus ``/metrics`` text.

Counters are cumulative, so a benchmark scrapes before and after its requests and uses the
difference (:func:`delta`). Parsing uses ``prometheus_client.parser.text_string_to_metric_families``;
samples of the same metric with different labels (several models/engines) are summed, except
the position label, which indexes per-position counts.

Metric names read (``_total`` is the counter sample suffix in the text format):

* vLLM: ``vllm:spec_decode_num_drafts``, ``vllm:spec_decode_num_draft_tokens``,
  ``vllm:spec_decode_num_accepted_tokens``, ``vllm:spec_decode_num_accepted_tokens_per_pos``
  (label ``position``, 0-based: draft position position+1 accepted). Exact: steps, per-position.
* TensorRT-LLM: ``trtllm_spec_decode_num_draft_tokens``, ``trtllm_spec_decode_num_accepted_tokens``
  (counters), ``trtllm_spec_decode_acceptance_length`` (gauge). With no steps counter, steps are
  ``draft tokens / draft_len`` for a fixed draft length (``draft_len`` must be given); without it
  the gauge's value after the run is used (marked approximate).
* trtspec (its Triton model, :mod:`trtspec.triton.metrics`): ``trtspec_spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens``, ``..._num_accepted_tokens_per_pos``
  (label ``position``, 0-based), vLLM's rules. Exact: steps, per-position.
* SGLang: ``sglang:spec_accept_length`` (a gauge of the recent mean AL, or a histogram in builds
  that export one), with ``sglang:spec_verify_calls`` and ``sglang:generation_tokens`` counters
  when present (then AL = generated tokens / verify calls, exact over the run); otherwise the
  gauge is weighted by ``sglang:num_requests`` before/after (approximate).
"""
from __future__ import annotations

from dataclasses import dataclass, field

ENGINES = ("vllm", "trtllm", "sglang", "trtspec")
_POSITION_LABELS = ("position", "token_position", "pos")


class MetricsError(ValueError):
    """The metrics text holds no speculative-decoding metrics of the expected engine."""


@dataclass(frozen=True)
class SpecCounters:
    """One scrape. ``None`` means the metric was absent. Per-position maps are keyed 0-based."""

    engine: str
    num_drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    accept_length: float | None = None          # gauge value (SGLang / TensorRT-LLM)
    accept_length_sum: float | None = None      # histogram _sum (SGLang builds with a histogram)
    accept_length_count: float | None = None    # histogram _count
    verify_calls: float | None = None
    generation_tokens: float | None = None
    num_requests: float | None = None


def detect_engine(text: str) -> str:
    """'vllm', 'trtllm', 'sglang' or 'trtspec' from the metric names present."""
    if "vllm:spec_decode" in text:
        return "vllm"
    if "trtllm_spec_decode" in text:
        return "trtllm"
    if "sglang:spec_" in text:
        return "sglang"
    if "trtspec_spec_decode" in text:
        return "trtspec"
    raise MetricsError("no speculative-decoding metrics found (expected vllm:spec_decode_*, "
                       "trtllm_spec_decode_*, sglang:spec_* or trtspec_spec_decode_*); is speculative decoding enabled?")


def _samples(text: str):
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            yield family.type, s.name[:-6] if s.name.endswith("_total") else s.name, s.labels, float(s.value)


def _position(labels: dict[str, str]) -> int | None:
    for key in _POSITION_LABELS:
        if key in labels:
            return int(labels[key])
    return None


def parse_metrics(text: str, engine: str = "auto", *, labels: dict[str, str] | None = None) -> SpecCounters:
    """Parse Prometheus exposition text into :class:`SpecCounters` for ``engine`` (or detected);
    ``labels``: keep only samples carrying these label values (e.g. ``{"model": "trtspec"}``)."""
    if engine == "auto":
        engine = detect_engine(text)
    if engine not in ENGINES:
        raise ValueError(f"engine={engine!r}: expected 'auto' or one of {ENGINES}")
    prefix = {"vllm": "vllm:spec_decode_", "trtllm": "trtllm_spec_decode_", "sglang": "sglang:",
              "trtspec": "trtspec_spec_decode_"}[engine]
    want = dict(labels or {})
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    drafted_pos: dict[int, float] = {}
    found = False
    for _ftype, name, sample_labels, value in _samples(text):
        if not name.startswith(prefix) or any(sample_labels.get(k) != v for k, v in want.items()):
            continue
        key = name[len(prefix):]
        if engine == "sglang" and not (key.startswith("spec_") or key in ("generation_tokens", "num_requests")):
            continue
        found = found or engine != "sglang" or key.startswith("spec_")
        pos = _position(sample_labels)
        if pos is not None and key in ("num_accepted_tokens_per_pos", "num_accepted_tokens", "accepted_tokens"):
            per_pos[pos] = per_pos.get(pos, 0.0) + value
            continue
        if pos is not None and key in ("num_draft_tokens", "drafted_tokens"):
            drafted_pos[pos] = drafted_pos.get(pos, 0.0) + value
            continue
        sums[key] = sums.get(key, 0.0) + value
    if not found:
        raise MetricsError(f"no {prefix}* speculative-decoding metrics in the scrape (engine={engine}"
                           f"{', labels ' + str(want) if want else ''})")
    if per_pos:
        base = min(per_pos)  # 0-based (vLLM) or 1-based labels
        per_pos = {k - base: v for k, v in per_pos.items()}
    num_drafts = sums.get("num_drafts")
    if engine == "trtllm" and num_drafts is None and drafted_pos:
        num_drafts = drafted_pos[min(drafted_pos)]  # every step drafts its first position
    g = sums.get
    if engine == "sglang":
        return SpecCounters(
            engine, accept_length=g("spec_accept_length"), accept_length_sum=g("spec_accept_length_sum"),
            accept_length_count=g("spec_accept_length_count"), verify_calls=g("spec_verify_calls"),
            generation_tokens=g("generation_tokens"), num_requests=g("num_requests"),
        )
    draft_tokens = g("num_draft_tokens", g("drafted_tokens"))
    if draft_tokens is None and drafted_pos:
        draft_tokens = sum(drafted_pos.values())
    accepted = g("num_accepted_tokens", g("accepted_tokens"))
    if accepted is None and per_pos:
        accepted = sum(per_pos.values())
    return SpecCounters(engine, num_drafts=num_drafts, draft_tokens=draft_tokens, accepted_tokens=accepted,
                        accepted_per_pos=dict(sorted(per_pos.items())), accept_length=g("acceptance_length"))


@dataclass(frozen=True)
class SpecDelta:
    """What happened between two scrapes. ``exact`` is False when AL comes from a gauge."""

    engine: str
    num_steps: float | None
    draft_tokens: float | None
    accepted_tokens: float | None
    accepted_per_pos: list[float]
    mean_al: float
    exact: bool
    note: str = ""


def _d(after: float | None, before: float | None) -> float | None:
    if after is None:
        return None
    value = after - (before or 0.0)
    if value < 0:
        raise MetricsError(f"counter went down ({before} -> {after}): the server restarted between scrapes")
    return value


def delta(before: SpecCounters, after: SpecCounters, *, draft_len: int | None = None) -> SpecDelta:
    """Counters accumulated between ``before`` and ``after`` and the mean AL they imply (see module
    docstring for each engine's rule). ``draft_len``: the fixed D of the run, needed for
    TensorRT-LLM's step count."""
    if before.engine != after.engine:
        raise ValueError(f"scrapes of different engines: {before.engine} vs {after.engine}")
    engine = after.engine
    if engine == "sglang":
        if after.verify_calls is not None and after.generation_tokens is not None:
            calls = _d(after.verify_calls, before.verify_calls)
            toks = _d(after.generation_tokens, before.generation_tokens)
            if calls:
                return SpecDelta(engine, calls, None, toks - calls, [], toks / calls, True,
                                 "AL = generation_tokens / spec_verify_calls over the run")
        if after.accept_length_count is not None:
            cnt = _d(after.accept_length_count, before.accept_length_count)
            s = _d(after.accept_length_sum, before.accept_length_sum)
            if cnt:
                return SpecDelta(engine, cnt, None, None, [], s / cnt, True, "histogram sum/count delta")
        if after.accept_length is None:
            raise MetricsError("sglang: neither spec_verify_calls+generation_tokens nor spec_accept_length present")
        n_a, n_b = after.num_requests, before.num_requests or 0.0
        if n_a and n_a > n_b and before.accept_length is not None and n_b > 0:
            al = (after.accept_length * n_a - before.accept_length * n_b) / (n_a - n_b)
            note = "gauge weighted by num_requests before/after (approximate)"
        else:
            al, note = after.accept_length, "gauge value after the run (approximate)"
        return SpecDelta(engine, None, None, None, [], al, False, note)

    drafts = _d(after.num_drafts, before.num_drafts)
    dtoks = _d(after.draft_tokens, before.draft_tokens)
    acc = _d(after.accepted_tokens, before.accepted_tokens)
    n = max(len(after.accepted_per_pos), len(before.accepted_per_pos))
    per_pos = [(_d(after.accepted_per_pos.get(k, 0.0), before.accepted_per_pos.get(k, 0.0)) or 0.0)
               for k in range(n)]
    if acc is None:
        raise MetricsError(f"{engine}: accepted-token counter absent")
    if drafts is None and engine == "trtllm":
        if draft_len and dtoks is not None:
            drafts = dtoks / draft_len
            note = f"steps = draft tokens / draft_len ({draft_len})"
        elif after.accept_length is not None:
            return SpecDelta(engine, None, dtoks, acc, per_pos, after.accept_length, False,
                             "acceptance_length gauge after the run (approximate; pass draft_len for exact)")
        else:
            raise MetricsError("trtllm: no step count: pass draft_len (fixed D) or expose acceptance_length")
    else:
        note = "steps = num_drafts"
    if not drafts:
        raise MetricsError(f"{engine}: no speculative steps between the two scrapes")
    return SpecDelta(engine, drafts, dtoks, acc, per_pos, 1.0 + acc / drafts, True, note)


def scrape(url: str, *, timeout: float = 10.0) -> str:
    """GET ``url`` (e.g. ``http://host:8000/metrics``) and return its text."""
    import requests

    resp = requests.get(url, timeout=timeout)
    resp.raise_for_status()
    return resp.text
