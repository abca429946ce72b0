"""Drafters: what one drafting phase costs (seconds) for D drafts, and the memory it needs (bytes).

* ``draft_model`` -- a separate small model (its own ``Architecture``) run D times serially, one token per request.
* ``eagle3`` -- one decoder layer of the target's width + an ``fc`` fusing 3 target hidden states (3h x h) + an LM
  head over the draft vocabulary (32k by default), run D times serially; ``width`` tokens per request per step for a
  tree (top-k expansion).
* ``mtp`` -- the target's own MTP layer (one full decoder layer of the target, MoE included, + ``eh_proj`` 2h x h +
  the shared LM head), reused serially D times (TensorRT-LLM's "MTP layers in autoregressive style").
* ``dflash`` -- a ~5-layer block-diffusion draft of the target's width: one parallel pass over a block of the last
  committed token + D masked positions, the target's LM head over the D drafts (``DrafterSpec.block_pass``).
* ``dspark`` -- the dflash pass plus a light serial Markov head (2h x h + an LM head over the draft vocabulary)
  applied D times.
* ``ngram`` / ``sa`` -- no model: n-gram / suffix-automaton lookup, a small fixed cost (15 us + 0.5 us per draft
  token in the analytic model; the engine file's ``lookup_us`` / ``lookup_per_token_us`` with a pricer).

Drafter classes (``DRAFTER_CLASS``), which is what makes them cost differently: **sequential** (eagle3, draft_model,
mtp: one draft forward per draft token, so draft cost grows with D), **parallel** (dflash, dspark: one forward per
block, so the draft pass barely grows with D; DSpark drafts exactly one block, D = its block size) and **lookup**
(ngram, sa: host-side). Every draft forward also pays a fixed cost (top-k, launches, state copies): ``SAMPLE_OVERHEAD``
in the analytic model, the engine's ``draft_forward_us`` with a pricer (``trtspec.recipes.pricing``), which also
prices the draft's kernels from measured data where it exists.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from dataclasses import dataclass

from trtspec.recipes.arch import Architecture, Block
from trtspec.recipes.costmodel import Precision, StepCost, add_logits, forward_cost, gemm_time, weight_bytes
from trtspec.recipes.errors import RecipeError
from trtspec.recipes.gpus import GPU

DRAFTERS = ("draft_model", "eagle3", "mtp", "dflash", "dspark", "ngram", "sa")
DRAFTER_CLASS = {"draft_model": "sequential", "eagle3": "sequential", "mtp": "sequential", "dflash": "parallel",
                 "dspark": "parallel", "ngram": "lookup", "sa": "lookup"}
TREE_DRAFTERS = ("eagle3",)
SAMPLE_OVERHEAD = 10e-6     # s: top-k / argmax + bookkeeping per serial draft step
LOOKUP_FIXED = 15e-6        # s: ngram / suffix-automaton lookup per step
LOOKUP_PER_TOKEN = 0.5e-6   # s per proposed token


@dataclass(frozen=True)
class DrafterSpec:
    """``kind`` in ``DRAFTERS``; ``draft_arch`` only for draft_model; ``draft_vocab`` for eagle3/dspark heads (32000);
    ``dflash_layers`` for dflash/dspark (default 5)."""

    kind: str
    draft_arch: Architecture | None = None
    draft_vocab: int = 32000
    dflash_layers: int = 5
    quant: str | None = None  # draft weights' --quant; default: the target's

    def __post_init__(self):
        if self.kind not in DRAFTERS:
            raise RecipeError(f"unknown drafter {self.kind!r}; expected one of {', '.join(DRAFTERS)}")
        if self.kind == "draft_model" and self.draft_arch is None:
            raise RecipeError("drafter draft_model needs the draft's architecture (--draft-model NAME|DIR)")
        if self.draft_vocab < 1 or self.dflash_layers < 1:
            raise RecipeError("draft_vocab and dflash_layers must be >= 1")

    @property
    def is_tree(self) -> bool:
        return self.kind in TREE_DRAFTERS

    def _target_layer(self, target: Architecture) -> Block:
        """The target's last full-attention layer (its own geometry and sparse attention kept: an MTP layer on
        DSA / DeepSeek-V4 is a DSA / compressed layer), with the target's feed-forward kind."""
        full = [b for b in target.blocks if b.mixer in ("attention", "mla")] or [b for b in target.blocks if b.mixer]
        ffn = "moe" if target.moe else "dense"
        if not full:
            return Block("attention", ffn)
        last = full[-1]
        return dataclasses.replace(last, ffn=ffn, ffn_width=last.ffn_width if ffn == "dense" else None)

    @property
    def drafter_class(self) -> str:
        """sequential | parallel | lookup (see the module docstring)."""
        return DRAFTER_CLASS[self.kind]

    def step_time(self, target: Architecture, gpu: GPU, prec: Precision, *, tp: int, batch: int, draft_len: int,
                  context: int, width: int = 1, pricer=None, ep: int = 1, dp: int = 1) -> StepCost:
        """Drafting phase for ``draft_len`` drafts (depth for a tree; ``width`` tokens per request per step);
        ``pricer`` (``trtspec.recipes.pricing.Pricer``): measured kernels and the engine's fixed costs; ``dp``: the
        target's attention data parallelism (the draft's layers run with it too)."""
        cost = StepCost()
        if draft_len <= 0:
            return cost
        h = target.hidden
        if self.quant:
            prec = Precision.of(self.quant)
        fixed = _fixed_cost(pricer)
        kw = dict(tp=tp, batch=batch, context=context, step_overhead=False, pricer=pricer, ep=ep, dp=dp)
        if self.kind in ("ngram", "sa"):
            if pricer is None:
                cost.overhead += LOOKUP_FIXED + LOOKUP_PER_TOKEN * draft_len
            else:
                cost.engine += pricer.engine.lookup + pricer.engine.lookup_per_token * draft_len
                cost.sources["engine"] = pricer.engine.name
            return cost
        if self.kind == "draft_model":
            one = forward_cost(self.draft_arch, gpu, prec, tokens=width, **kw)
            return cost.add(one.add(fixed), draft_len)
        if self.kind == "eagle3":
            layer = Counter({Block("attention", "dense"): 1})
            one = forward_cost(_eagle_arch(target), gpu, prec, tokens=width, blocks=layer,
                               lm_head_params=self.draft_vocab * h, **kw)
            one.linear += _gemm(h, 3 * h, batch * width, gpu, prec, tp, pricer, h)
            return cost.add(one.add(fixed), draft_len)
        if self.kind == "mtp":
            layer = Counter({self._target_layer(target): 1})
            one = forward_cost(target, gpu, prec, tokens=width, blocks=layer, **kw)
            one.linear += _gemm(h, 2 * h, batch * width, gpu, prec, tp, pricer, h)
            return cost.add(one.add(fixed), draft_len)
        # dflash / dspark: one parallel pass over the block (see block_pass)
        cost.add(self.block_pass(target, gpu, prec, draft_len=draft_len, **kw))
        cost.add(fixed)
        if self.kind == "dspark":
            head = StepCost(overhead=gpu.layer_overhead).add(fixed)
            head.linear += _gemm(h, 2 * h, batch, gpu, prec, tp, pricer, h)
            head.lm_head += _gemm(self.draft_vocab, h, batch, gpu, prec, tp, pricer, h)
            add_logits(head, gpu, tp, batch, self.draft_vocab)
            cost.add(head, draft_len)
        return cost

    def block_pass(self, target: Architecture, gpu: GPU, prec: Precision, *, draft_len: int, batch: int,
                   **kw) -> StepCost:
        """The parallel drafter's one draft forward: its ``dflash_layers`` layers over one block per request against
        the request's context, and the target's LM head over the ``draft_len`` drafted positions only. A DFlash
        block carries the root token as well as the drafts, ``draft_len + 1`` tokens (the last committed token at
        position 0, then ``draft_len`` masked positions): SGLang's DFlash worker runs the draft over
        ``speculative_num_draft_tokens`` = D + 1 positions per request and reads logits from positions 1..D
        (``python/sglang/srt/speculative/dflash_worker.py``), as ``trtspec.runtime.block_head`` does; a DSpark block
        of ``draft_len`` tokens drafts at every position (``block_head.block_drafts``). ``kw``: the
        ``forward_cost`` options (``tp``, ``context``, ``pricer``, ...)."""
        arch = _eagle_arch(target)
        layers = Counter({Block("attention", "dense"): self.dflash_layers})
        block = draft_len + 1 if self.kind == "dflash" else draft_len
        cost = forward_cost(arch, gpu, prec, tokens=block, batch=batch, blocks=layers, lm_head_params=0, **kw)
        pricer, tp = kw.get("pricer"), kw.get("tp", 1)
        head, rows = arch.lm_head_params, batch * draft_len
        measured = pricer.lm_head(head, arch.hidden, tp, rows) if pricer is not None else None
        cost.lm_head += measured if measured is not None else gemm_time(head / tp, rows, gpu, prec, arch.hidden)
        cost.sources["lm_head"] = pricer.label if measured is not None else "roofline"
        return add_logits(cost, gpu, tp, rows, head / arch.hidden)

    def _layers(self, target: Architecture):
        """(architecture, Counter of blocks) of the draft's own decoder layers; None for a lookup drafter."""
        if self.kind in ("ngram", "sa"):
            return None
        if self.kind == "draft_model":
            return self.draft_arch, self.draft_arch.block_counts()
        if self.kind == "mtp":
            return target, Counter({self._target_layer(target): 1})
        n = 1 if self.kind == "eagle3" else self.dflash_layers
        return _eagle_arch(target), Counter({Block("attention", "dense"): n})

    def prefill_time(self, target: Architecture, gpu: GPU, prec: Precision, *, tp: int, tokens: int, pricer=None,
                     ep: int = 1) -> float:
        """Seconds for the drafter to take in one prompt of ``tokens`` tokens (its own layers fill their KV cache:
        a draft model's whole forward, an EAGLE-3 / MTP / DFlash head's layers over the prompt's hidden states;
        logits of the last token only); 0 for a lookup drafter."""
        layers = self._layers(target)
        if layers is None:
            return 0.0
        arch, blocks = layers
        if self.quant:
            prec = Precision.of(self.quant)
        head = None if self.kind == "draft_model" else (0 if self.kind in ("mtp", "dflash") else
                                                        self.draft_vocab * target.hidden)
        return forward_cost(arch, gpu, prec, tp=tp, batch=1, tokens=tokens, context=0, blocks=blocks,
                            lm_head_params=head, step_overhead=False, pricer=pricer, ep=ep, prefill=True).total

    def kv_bytes_per_token(self, target: Architecture, prec: Precision, tp: int) -> float:
        """KV cache of the draft's own layers per token on one GPU (what a speculative server sets aside beside the
        target's, per cached token); 0 for a lookup drafter."""
        from trtspec.recipes import variants
        from trtspec.recipes.costmodel import cache_bytes

        layers = self._layers(target)
        if layers is None:
            return 0.0
        arch, blocks = layers
        if self.quant:
            prec = Precision.of(self.quant)
        if self.kind == "draft_model":
            return cache_bytes(arch, prec, tp, 1, 1)
        out = 0.0
        for block, count in blocks.items():
            if block.is_variant:
                out += count * variants.cache_bytes(arch, block, prec, tp, 1)
            else:
                div = 1 if block.mixer == "mla" else min(tp, arch.num_kv_heads)
                out += count * arch.kv_elems_per_token(block) * prec.kv_bytes / div
        return out

    def memory_bytes(self, target: Architecture, prec: Precision, tp: int) -> float:
        """Extra weights on one GPU (KV of the draft is small next to the target's and is left out)."""
        h = target.hidden
        if self.kind in ("ngram", "sa"):
            return 0.0
        if self.kind == "draft_model":
            return weight_bytes(self.draft_arch, prec, tp)
        core = _eagle_arch(target)
        layer = core.mixer_params("attention") + core.ffn_params("dense")
        if self.kind == "eagle3":
            return (layer + 3 * h * h + self.draft_vocab * h) * prec.weight_bytes / tp
        if self.kind == "mtp":
            blk = self._target_layer(target)
            experts = target.moe.num_experts * target.expert_params if target.moe else 0
            return (target.mixer_params(blk) + target.ffn_params(blk) + experts + 2 * h * h) * prec.weight_bytes / tp
        extra = (2 * h * h + self.draft_vocab * h) if self.kind == "dspark" else 0
        return (self.dflash_layers * layer + extra) * prec.weight_bytes / tp


def _fixed_cost(pricer) -> StepCost:
    """The fixed cost of one draft forward: the engine's ``draft_forward`` with a pricer, else SAMPLE_OVERHEAD."""
    if pricer is None:
        return StepCost(overhead=SAMPLE_OVERHEAD)
    return StepCost(engine=pricer.engine.draft_forward, sources={"engine": pricer.engine.name})


def _gemm(n, k, m, gpu, prec, tp, pricer, hidden) -> float:
    """One n x k weight GEMM (split n/tp) on m rows of width ~``hidden``: measured where the pricer has it, else
    the roofline."""
    measured = pricer.gemm(n / tp, k, m, prec) if pricer is not None else None
    return measured if measured is not None else gemm_time(n * k / tp, m, gpu, prec, hidden)


@functools.lru_cache(maxsize=64)
def _eagle_arch(target: Architecture) -> Architecture:
    """A dense GQA layer of the target's width (EAGLE-3 / DFlash draft layers use a Llama-style layer)."""
    inter = target.intermediate or (target.moe.intermediate * target.moe.experts_per_token if target.moe else 4 * target.hidden)
    return Architecture(name=f"{target.name}-draft-layer", hidden=target.hidden, vocab=target.vocab,
                        num_heads=target.num_heads,
                        num_kv_heads=target.num_kv_heads if not target.mla else math.gcd(8, target.num_heads),
                        head_dim=target.head_dim if not target.mla else 128, intermediate=inter,
                        blocks=(Block("attention", "dense"),))
