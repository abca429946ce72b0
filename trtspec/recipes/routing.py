"""How many distinct routed experts a forward loads: the routing assumptions of the MoE prices.

In the decode and verification regime a routed-expert layer costs about the weights of the distinct experts its
tokens touch (``trtspec.recipes.costmodel.moe_time``; measured tables: ``trtspec.recipes.perfdb``). That count
depends on how tokens route, and two effects make it smaller than independent uniform routing would:

* **locality within a request** (``request_tokens``): the tokens a speculative step verifies for one request are
  successive tokens of one text -- a chain's drafts, a tree node and its parent -- and successive tokens share
  experts more often than chance: Mixtral's routing analysis (Jiang et al. 2024, "Mixtral of Experts",
  arXiv:2401.04088, section 5) finds consecutive tokens assigned the same expert far more often than at random,
  about twice the chance rate of a repeated first choice (1/8 for 2 of 8 experts) in its deeper layers, i.e. a
  token keeps about ``LOCALITY`` = (1/4 - 1/8) / (1 - 1/8) ~ 0.15 of its predecessor's experts beyond chance. A
  request's T tokens then load the experts of ``1 + (T - 1) * (1 - LOCALITY)`` independent ones. Requests of a batch
  are independent texts: no locality between them, and a plain decode step (one token per request) has none;
* **skewed popularity** (``popular_experts``): real traffic does not use the experts evenly. aiconfigurator-core
  collects its MoE tables under power-law routing (its collector's router logits "simulating real-world load
  imbalance"; exponent 1.01 in its DeepSeek-family models, the distribution trtspec queries every table at:
  ``perfdb.MOE_DISTRIBUTION``); the analytic price of a shape the tables lack assumes a skew of the same exponent
  (``POPULARITY_EXPONENT``), so that one model is not priced under two routings depending on which path prices it.
  The form is trtspec's own: a Zipf popularity over the experts' ranks (the collector instead draws each expert's
  load from a power law of that exponent). The measured path needs no such assumption: its prices hold the
  collector's routing already (``perfdb`` reads them through the uniform count as a regressor of the measured
  points).
"""
from __future__ import annotations

import functools

LOCALITY = 0.15            # share of a token's experts kept from its predecessor in the same request, beyond chance
POPULARITY_EXPONENT = 1.01  # Zipf exponent of expert popularity for the analytic price (aiconfigurator-core's)


def unique_experts(experts: int, topk: int, tokens: float) -> float:
    """Expected distinct experts hit by ``tokens`` tokens choosing ``topk`` of ``experts`` each uniformly and
    independently: E*(1-(1-k/E)^T)."""
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


@functools.lru_cache(maxsize=None)
def _inclusion(experts: int, topk: int, exponent: float) -> tuple:
    """Per expert, the probability that one token's top-``topk`` includes it when the i-th most popular expert has
    popularity i^-exponent: proportional to popularity, the most popular capped at 1 (always chosen), the rest
    rescaled so that a token chooses ``topk`` experts in all."""
    weight = [(i + 1) ** -exponent for i in range(experts)]
    capped = 0  # weights are decreasing, so the capped experts are the first ones
    while True:
        rest = sum(weight[capped:])
        scale = (topk - capped) / rest
        if capped < experts and weight[capped] * scale >= 1.0:
            capped += 1
            continue
        return tuple([1.0] * capped + [w * scale for w in weight[capped:]])


def popular_experts(experts: int, topk: int, tokens: float, exponent: float = POPULARITY_EXPONENT) -> float:
    """Expected distinct experts hit by ``tokens`` independent tokens under Zipf popularity (``_inclusion``):
    sum over experts of 1 - (1 - q_i)^T; equals ``unique_experts`` at exponent 0."""
    if topk >= experts:
        return float(experts)
    return sum(1.0 - (1.0 - q) ** tokens for q in _inclusion(experts, topk, float(exponent)))


def request_tokens(tokens: float, requests: int | None, locality: float = LOCALITY) -> float:
    """The independent tokens whose routing loads as many distinct experts as ``tokens`` tokens spread evenly over
    ``requests`` requests (module docstring): each request's tokens after its first count 1 - ``locality`` each.
    ``requests`` None (unknown) or at least ``tokens``: no locality."""
    if not requests or tokens <= requests:
        return tokens
    per = tokens / requests
    return requests * (1.0 + (per - 1.0) * (1.0 - locality))
