"""``load_pipeline`` -> ``Pipeline``: a target, a drafter and a tokenizer behind ``generate``."""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trtspec.runtime.config import ModelFormatError
from trtspec.runtime.drafters import DRAFTERS, Drafter
from trtspec.runtime.engine import Engine
from trtspec.runtime.params import BLOCK_DRAFTERS, SamplingParams, SpecConfig, TreeShape
from trtspec.runtime.stats import SpecStats


class Tokenizer:
    """A ``tokenizers.Tokenizer`` read from ``tokenizer.json``: ``encode(text) -> ids``, ``decode(ids) -> text``."""

    def __init__(self, model_dir: str | Path):
        from tokenizers import Tokenizer as _Tok

        path = Path(model_dir) / "tokenizer.json"
        if not path.is_file():
            raise ModelFormatError(f"{model_dir}: missing tokenizer.json")
        try:
            self.impl = _Tok.from_file(str(path))
        except Exception as e:   # the tokenizers library raises a bare Exception on bad files
            raise ModelFormatError(f"{path}: cannot be read as a tokenizers file ({e})") from e
        self.path = path

    @property
    def vocab_size(self) -> int:
        return self.impl.get_vocab_size(with_added_tokens=True)

    def vocab(self) -> dict[str, int]:
        return self.impl.get_vocab(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.impl.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.impl.decode(list(ids), skip_special_tokens=True)


@dataclass
class Generation:
    """One prompt's result: the generated ``text`` and ``token_ids`` (prompt excluded) and its stats."""

    text: str
    token_ids: list[int]
    stats: SpecStats


class _NoDrafter(Drafter):
    """Plain decoding (only D = 0 is possible)."""

    name = "none"

    def __init__(self, device="cpu"):
        self.device = torch.device(device)

    def propose(self, reqs, depths, branching, mode):
        from trtspec.runtime.drafters.base import chain_proposal

        return chain_proposal(torch.tensor([r.tokens[-1] for r in reqs], device=self.device))

    def can_draft(self, req):
        return False


def _stop_ids(target_dir: Path, eos: tuple[int, ...]) -> tuple[int, ...]:
    gen = target_dir / "generation_config.json"
    ids = set(eos)
    if gen.is_file():
        e = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
        ids.update(e if isinstance(e, list) else ([] if e is None else [e]))
    return tuple(sorted(int(i) for i in ids))


class Pipeline:
    """A loaded target + drafter. ``generate`` runs a batch to completion; ``engine`` gives a
    continuous-batching :class:`Engine` on the same models."""

    def __init__(self, target, drafter: Drafter, spec: SpecConfig, tokenizer: Tokenizer, stop_ids, target_dir,
                 adaptive=None):
        self.target, self.drafter, self.spec, self.tokenizer = target, drafter, spec, tokenizer
        self.stop_token_ids, self.target_dir = stop_ids, target_dir
        self.adaptive = adaptive     # AdaptiveConfig of spec.speculation == "adaptive"

    def engine(self, *, max_batch_size: int = 8, max_seq_len: int | None = None, seed: int | None = None) -> Engine:
        spec = self.spec if seed is None else dataclasses.replace(self.spec, seed=seed)
        return Engine(self.target, self.drafter, spec, max_batch_size=max_batch_size, max_seq_len=max_seq_len,
                      adaptive=self.adaptive)

    def without_speculation(self) -> "Pipeline":
        """The same target and tokenizer with no drafter (D = 0): the baseline for speed comparisons."""
        base = dataclasses.replace(self.spec, draft_len=0, tree=None, draft_len_schedule=None, speculation="static")
        return Pipeline(self.target, _NoDrafter(self.target.lm_head.weight.device), base, self.tokenizer, self.stop_token_ids, self.target_dir)

    def with_speculation(self, speculation: str, adaptive=None) -> "Pipeline":
        """A view sharing the models whose engines run ``speculation`` (static | adaptive; adaptive
        needs ``adaptive``, an :class:`~trtspec.runtime.controller.AdaptiveConfig`)."""
        if speculation == "adaptive" and adaptive is None:
            raise ValueError("speculation='adaptive' needs an AdaptiveConfig (the device's step costs)")
        spec = dataclasses.replace(self.spec, speculation=speculation)
        return Pipeline(self.target, self.drafter, spec, self.tokenizer, self.stop_token_ids, self.target_dir,
                        adaptive if speculation == "adaptive" else None)

    def params(self, **kw) -> SamplingParams:
        """SamplingParams with this pipeline's stop tokens."""
        return SamplingParams(stop_token_ids=self.stop_token_ids, **kw)

    def generate(self, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, progress=None) -> list[Generation]:
        """Generate for every prompt in one batch. Returns one Generation per prompt, in order."""
        if isinstance(prompts, str) or not prompts:
            raise ValueError("prompts must be a non-empty list of strings")
        ids = [self.tokenizer.encode(p) for p in prompts]
        outs = self.generate_ids(ids, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                 top_p=top_p, seed=seed, progress=progress)
        return [Generation(self.tokenizer.decode(t), t, s) for t, s in outs]

    def generate_ids(self, prompt_ids: list[list[int]], *, max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0,
                     seed=0, progress=None) -> list[tuple[list[int], SpecStats]]:
        """Token-level ``generate``: ``[(generated ids, stats)]`` per prompt; ``self.last_stats`` aggregates."""
        params = self.params(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
        ctx = self.target.config.max_position_embeddings
        longest = max(len(p) for p in prompt_ids)
        eng = self.engine(max_batch_size=len(prompt_ids), seed=seed,
                          max_seq_len=min(ctx, max(longest + max_new_tokens, 2)) if longest < ctx else None)
        for i, p in enumerate(prompt_ids):
            eng.add_request(i, p, params)
        out: dict[int, list[int]] = {i: [] for i in range(len(prompt_ids))}
        stats: dict[int, SpecStats] = {}
        t0 = time.perf_counter()
        while eng.has_work():
            for o in eng.step():
                out[o.request_id] += o.new_token_ids
                stats[o.request_id] = o.stats
                if progress is not None:
                    progress(len(o.new_token_ids))
        eng.stats.total_time_s = time.perf_counter() - t0
        self.last_stats = eng.stats
        return [(out[i], stats[i]) for i in range(len(prompt_ids))]


def _check_same_tokenizer(target_tok: Tokenizer, draft_dir: Path) -> None:
    if not (draft_dir / "tokenizer.json").is_file():
        return
    draft_tok = Tokenizer(draft_dir)
    if draft_tok.vocab() != target_tok.vocab():
        raise ModelFormatError(f"tokenizer mismatch: {draft_dir}/tokenizer.json differs from the target's "
                               f"{target_tok.path} ({draft_tok.vocab_size} vs {target_tok.vocab_size} tokens); "
                               "the draft must share the target's tokenizer")


def _check_mtp(target_dir: Path, tcfg, draft) -> None:
    """``mtp`` drafts with the target's own MTP layer: no --draft, and a target that has one."""
    if draft is not None:
        raise ValueError(f"drafter 'mtp' reads the MTP layer from the target ({target_dir}); drop draft={draft}")
    if getattr(tcfg, "num_nextn_predict_layers", 0) < 1:
        raise ModelFormatError(f"{target_dir}: no MTP layers (config num_nextn_predict_layers="
                               f"{getattr(tcfg, 'num_nextn_predict_layers', 0)}); drafter 'mtp' needs a "
                               "DeepSeek-V3-layout target with num_nextn_predict_layers >= 1")


def _default_draft_len(draft, drafter: str) -> int:
    """D when none is given: SpecConfig's default; a block drafter's: every draft of its block."""
    if drafter in BLOCK_DRAFTERS and draft is not None:
        from trtspec.runtime.block_head import read_block_config

        return read_block_config(draft).drafts
    return SpecConfig.__dataclass_fields__["draft_len"].default


def load_pipeline(target, draft=None, *, drafter: str = "draft_model", draft_len: int | None = None,
                  tree: TreeShape | str | None = None, verify: str = "greedy",
                  draft_len_schedule: dict[int, int] | None = None, device: str = "cpu",
                  dtype: torch.dtype = torch.float32, quant_activations: bool = True, adaptive=None,
                  **spec_kw) -> Pipeline:
    """Load a target (and a drafter) from Hugging Face directories; every check runs before any weight loads.

    Args:
        target: directory with config.json, *.safetensors and tokenizer.json.
        draft: the draft model directory (``draft_model``), EAGLE-3 head directory (``eagle3``) or DFlash /
            DSpark head directory (``dflash`` / ``dspark``, Model-Optimizer exports); unused by ``ngram`` and
            ``mtp`` (the target's own MTP layer). With a model drafter and no draft, only ``draft_len=0`` is
            allowed.
        drafter: draft_model | ngram | eagle3 | mtp | dflash | dspark.  tree: ``TreeShape`` or ``"topk=K,depth=L"``.
        draft_len, verify, draft_len_schedule, **spec_kw: see :class:`SpecConfig` (``speculation="adaptive"``
            needs ``adaptive``); ``draft_len=None``: its default, except for a block drafter: all the drafts of
            its block.
        adaptive: :class:`~trtspec.runtime.controller.AdaptiveConfig` (step costs, acceptance prior)
            of adaptive speculation.
        device, dtype: where and in what precision the models run.
        quant_activations: for a quantized (NVIDIA Model-Optimizer) target or draft, also simulate its
            activation and FP8 KV-cache quantizers (default); False dequantizes the weights only.
            ``pipeline.target.quant`` (a :class:`~trtspec.runtime.quant.QuantInfo`, None when
            unquantized) says what was loaded.
    """
    from trtspec.runtime.config import read_eagle3_config, read_model_config
    from trtspec.runtime.models import load_eagle3, load_model

    if drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {DRAFTERS}, got {drafter!r}")
    if isinstance(tree, str):
        tree = TreeShape.parse(tree)
    if draft_len is None:
        draft_len = _default_draft_len(draft, drafter)
    spec = SpecConfig(draft_len=draft_len, tree=tree, verify=verify, draft_len_schedule=draft_len_schedule, **spec_kw)
    if spec.speculation == "adaptive" and adaptive is None:
        raise ValueError("speculation='adaptive' needs adaptive=AdaptiveConfig(costs=...) (the device's step costs)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch sees no CUDA device")
    target_dir = Path(target)
    tcfg = read_model_config(target_dir)
    tok = Tokenizer(target_dir)
    if tok.vocab_size > tcfg.vocab_size:
        raise ModelFormatError(f"vocab mismatch: {target_dir}/tokenizer.json has {tok.vocab_size} tokens but the "
                               f"target's config.json says vocab_size={tcfg.vocab_size}")
    if drafter == "mtp":
        _check_mtp(target_dir, tcfg, draft)
    if drafter == "ngram" and tree is not None and tree.topk > 1:
        raise ValueError("drafter 'ngram' proposes chains only; drop --tree or use topk=1")
    if drafter in ("draft_model", "eagle3", *BLOCK_DRAFTERS) and draft is None and spec.max_depth > 0:
        raise ValueError(f"drafter {drafter!r} needs draft=<directory> (or draft_len=0 for plain decoding)")
    if draft is not None and drafter == "draft_model":
        dcfg = read_model_config(draft)
        if dcfg.vocab_size != tcfg.vocab_size:
            raise ModelFormatError(f"vocab mismatch: draft {draft} has vocab_size={dcfg.vocab_size}, target "
                                   f"{target_dir} has {tcfg.vocab_size}; the draft must share the target's vocabulary")
        _check_same_tokenizer(tok, Path(draft))
    if draft is not None and drafter == "eagle3":
        ecfg = read_eagle3_config(draft)
        if ecfg.layer.vocab_size != tcfg.vocab_size:
            raise ModelFormatError(f"vocab mismatch: eagle3 head {draft} has vocab_size={ecfg.layer.vocab_size}, "
                                   f"target has {tcfg.vocab_size}")
        bad = [i for i in ecfg.aux_layer_ids if not 0 <= i < tcfg.num_hidden_layers]
        if bad:
            raise ModelFormatError(f"{draft}: eagle_aux_hidden_state_layer_ids {bad} outside the target's layers "
                                   f"0..{tcfg.num_hidden_layers - 1}")

    if draft is not None and drafter in BLOCK_DRAFTERS:
        from trtspec.runtime.drafters.block import check_block_draft

        check_block_draft(draft, drafter, tcfg, spec)
        _check_same_tokenizer(tok, Path(draft))
    if draft is not None and drafter in ("eagle3", *BLOCK_DRAFTERS):
        from trtspec.runtime.drafters.block import check_trained_for

        check_trained_for(draft, tok.vocab())

    model = load_model(target_dir, device=device, dtype=dtype, quant_activations=quant_activations)
    if drafter == "ngram":
        from trtspec.runtime.drafters.ngram import NgramDrafter

        d: Drafter = NgramDrafter(device=device)
    elif drafter == "mtp":
        from trtspec.runtime.deepseek import load_mtp
        from trtspec.runtime.drafters.mtp import MTPDrafter

        d = MTPDrafter(load_mtp(target_dir, model, device=device, dtype=dtype, quant_activations=quant_activations),
                       model)
    elif draft is None:
        d = _NoDrafter(device)
    elif drafter == "draft_model":
        from trtspec.runtime.drafters.draft_model import DraftModelDrafter

        d = DraftModelDrafter(load_model(draft, device=device, dtype=dtype, quant_activations=quant_activations))
    elif drafter in BLOCK_DRAFTERS:
        from trtspec.runtime.drafters.block import block_drafter

        d = block_drafter(draft, model, device=device, dtype=dtype)
    else:
        from trtspec.runtime.drafters.eagle3 import Eagle3Drafter

        d = Eagle3Drafter(load_eagle3(draft, model, device=device, dtype=dtype), model)
    return Pipeline(model, d, spec, tok, _stop_ids(target_dir, tcfg.eos_token_ids), target_dir,
                    adaptive if spec.speculation == "adaptive" else None)
