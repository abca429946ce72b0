"""Prometheus parsing of each engine's speculative-decoding metrics, before/after deltas.

The fixtures are written from the engines' documented metric names and types; they are text
we wrote, not captures of real servers.
"""
import pytest

from trtspec.bench import prometheus as prom

VLLM = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {dtoks}
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {acc}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
# HELP vllm:num_requests_running Running requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} 0.0
"""

TRTLLM = """\
# HELP trtllm_spec_decode_num_draft_tokens Total draft tokens in speculative decoding.
# TYPE trtllm_spec_decode_num_draft_tokens counter
trtllm_spec_decode_num_draft_tokens_total{{engine_type="pytorch",model_name="m"}} {dtoks}
# HELP trtllm_spec_decode_num_accepted_tokens Total accepted tokens in speculative decoding.
# TYPE trtllm_spec_decode_num_accepted_tokens counter
trtllm_spec_decode_num_accepted_tokens_total{{engine_type="pytorch",model_name="m"}} {acc}
# HELP trtllm_spec_decode_acceptance_length Acceptance length in speculative decoding.
# TYPE trtllm_spec_decode_acceptance_length gauge
trtllm_spec_decode_acceptance_length{{engine_type="pytorch",model_name="m"}} {al}
"""

SGLANG = """\
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m"}} {al}
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{{model_name="m"}} {nreq}
# HELP sglang:generation_tokens_total Generation tokens.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {gen}
"""


def test_vllm_counters_and_delta():
    before = prom.parse_metrics(VLLM.format(drafts=100, dtoks=300, acc=150, p0=70, p1=50, p2=30))
    after = prom.parse_metrics(VLLM.format(drafts=300, dtoks=900, acc=450, p0=190, p1=150, p2=110))
    assert before.engine == "vllm" and before.num_drafts == 100 and before.accepted_per_pos == {0: 70, 1: 50, 2: 30}
    d = prom.delta(before, after)
    assert d.exact and d.num_steps == 200 and d.accepted_tokens == 300
    assert d.accepted_per_pos == [120, 100, 80]
    assert d.mean_al == pytest.approx(1 + 300 / 200)


def test_vllm_sums_label_sets_of_two_engines():
    one = VLLM.format(drafts=10, dtoks=30, acc=6, p0=4, p1=1, p2=1)
    two = one.replace('engine="0"', 'engine="1"').split("\n")
    text = one + "\n".join(line for line in two if line and not line.startswith("#")) + "\n"
    c = prom.parse_metrics(text)
    assert c.num_drafts == 20 and c.accepted_per_pos == {0: 8, 1: 2, 2: 2}


def test_trtllm_delta_uses_draft_len_or_gauge():
    before = prom.parse_metrics(TRTLLM.format(dtoks=400, acc=200, al=2.0))
    after = prom.parse_metrics(TRTLLM.format(dtoks=1000, acc=560, al=2.3))
    assert after.engine == "trtllm" and after.draft_tokens == 1000 and after.accept_length == 2.3
    d = prom.delta(before, after, draft_len=3)
    assert d.exact and d.num_steps == 200 and d.mean_al == pytest.approx(1 + 360 / 200)
    g = prom.delta(before, after)
    assert not g.exact and g.mean_al == 2.3 and "approximate" in g.note


def test_trtllm_per_position_variant():
    text = """\
# TYPE trtllm_spec_decode_drafted_tokens counter
trtllm_spec_decode_drafted_tokens_total{token_position="1"} 50
trtllm_spec_decode_drafted_tokens_total{token_position="2"} 50
# TYPE trtllm_spec_decode_accepted_tokens counter
trtllm_spec_decode_accepted_tokens_total{token_position="1"} 40
trtllm_spec_decode_accepted_tokens_total{token_position="2"} 25
"""
    c = prom.parse_metrics(text)
    assert c.num_drafts == 50 and c.draft_tokens == 100 and c.accepted_tokens == 65
    assert c.accepted_per_pos == {0: 40, 1: 25}
    zero = prom.SpecCounters("trtllm", 0, 0, 0, {})
    assert prom.delta(zero, c).mean_al == pytest.approx(1 + 65 / 50)


def test_sglang_gauge_weighted_by_requests():
    before = prom.parse_metrics(SGLANG.format(al=2.0, nreq=10, gen=1000))
    after = prom.parse_metrics(SGLANG.format(al=2.5, nreq=30, gen=4000))
    assert after.engine == "sglang" and after.accept_length == 2.5 and after.num_requests == 30
    d = prom.delta(before, after)
    assert not d.exact
    assert d.mean_al == pytest.approx((2.5 * 30 - 2.0 * 10) / 20)


def test_sglang_verify_call_counter_is_exact():
    extra = "# TYPE sglang:spec_verify_calls counter\nsglang:spec_verify_calls_total{{model_name=\"m\"}} {calls}\n"
    before = prom.parse_metrics((SGLANG + extra).format(al=2.0, nreq=10, gen=1000, calls=500))
    after = prom.parse_metrics((SGLANG + extra).format(al=2.5, nreq=30, gen=4000, calls=1700))
    d = prom.delta(before, after)
    assert d.exact and d.mean_al == pytest.approx(3000 / 1200)


def test_errors():
    with pytest.raises(prom.MetricsError, match="no speculative-decoding metrics"):
        prom.parse_metrics("# TYPE x counter\nx_total 1\n")
    a = prom.parse_metrics(VLLM.format(drafts=100, dtoks=300, acc=150, p0=70, p1=50, p2=30))
    b = prom.parse_metrics(VLLM.format(drafts=5, dtoks=15, acc=1, p0=1, p1=0, p2=0))
    with pytest.raises(prom.MetricsError, match="restarted"):
        prom.delta(a, b)
    with pytest.raises(prom.MetricsError, match="no speculative steps"):
        prom.delta(a, a)
    with pytest.raises(ValueError, match="engine='tgi'"):
        prom.parse_metrics(VLLM.format(drafts=1, dtoks=1, acc=1, p0=1, p1=0, p2=0), engine="tgi")
