"""Routing assumptions of the MoE prices (trtspec.recipes.routing) and the logits' gather and read (costmodel)."""
import pytest

from trtspec.recipes.arch import load_architecture
from trtspec.recipes.costmodel import Precision, forward_cost, logits_time
from trtspec.recipes.gpus import load_gpu
from trtspec.recipes.routing import LOCALITY, popular_experts, request_tokens, unique_experts


@pytest.mark.parametrize("experts,topk", [(128, 8), (256, 8), (16, 1), (64, 6)])
def test_popularity_without_skew_is_uniform_routing_and_skew_loads_fewer_experts(experts, topk):
    for tokens in (1, 3, 16, 64, 1000):
        uniform = unique_experts(experts, topk, tokens)
        assert popular_experts(experts, topk, tokens, exponent=0.0) == pytest.approx(uniform)
        skewed = popular_experts(experts, topk, tokens)
        assert skewed <= uniform + 1e-9
        assert skewed >= min(experts, topk) - 1e-9  # one token still chooses its top-k
    assert popular_experts(experts, topk, 1) == pytest.approx(topk)
    assert popular_experts(experts, topk, 10 ** 6) == pytest.approx(experts)
    assert popular_experts(8, 8, 3) == 8.0


def test_request_tokens_counts_a_request_s_later_tokens_at_one_minus_locality():
    assert request_tokens(1, 1) == 1
    assert request_tokens(8, 8) == 8  # one token per request: a plain decode batch, no locality
    assert request_tokens(4, 1) == pytest.approx(1 + 3 * (1 - LOCALITY))
    assert request_tokens(32, 8) == pytest.approx(8 * (1 + 3 * (1 - LOCALITY)))
    assert request_tokens(5, None) == 5


def test_verified_tokens_of_one_request_cost_less_expert_loading_than_as_many_requests():
    """Roofline: 8 tokens of one request load fewer experts than 8 requests' tokens (locality), but more than 1."""
    arch, gpu, prec = load_architecture("qwen3-30b-a3b"), load_gpu("h100"), Precision.of("none")
    one = forward_cost(arch, gpu, prec, tp=4, batch=1, tokens=1).moe
    chain = forward_cost(arch, gpu, prec, tp=4, batch=1, tokens=8).moe
    batch = forward_cost(arch, gpu, prec, tp=4, batch=8, tokens=1).moe
    assert one < chain < batch


def test_logits_are_gathered_over_tp_and_read_once():
    gpu = load_gpu("h100")
    gather1, read1 = logits_time(gpu, 1, 512, 151936)
    gather4, read4 = logits_time(gpu, 4, 512, 151936)
    nbytes = 512 * 151936 * 2
    assert gather1 == 0.0 and read1 == read4 == pytest.approx(nbytes / (gpu.bandwidth * gpu.eff_bandwidth))
    assert gather4 == pytest.approx(0.75 * nbytes / (gpu.link_bandwidth * gpu.eff_link))
    arch, prec = load_architecture("llama-3.1-8b"), Precision.of("none")
    small, large = (forward_cost(arch, gpu, prec, tp=2, batch=b, tokens=4, step_overhead=False) for b in (1, 64))
    assert large.comm - small.comm > 60 * logits_time(gpu, 2, 4, arch.vocab)[0]
