"""Stage 5 of ``trtspec build``: serving configs from the recipe, each validated for its engine version.

:func:`plan_configs` builds ``llm_api.yaml`` (TensorRT-LLM ``--trtllm-version``), ``vllm.yaml`` (``--vllm-version``)
and ``sglang.args`` in memory and validates them against the facts of those versions (``engine_facts``); the
pipeline calls it right after the recipe, so a contradiction fails before any quantization. :func:`write_configs`
writes them. Each engine's part also says, in words, what the config means on that version
(``EngineConfigs.meaning``, printed in the bundle README); notes that change the plan (a D=1 tier where the planner
wanted 0, a schedule a version cannot express) also go into the recipe's provenance.

Paths inside the configs are relative to the bundle (``./target``, ``./draft``): the serve
commands in the bundle's README run from the bundle directory, so the bundle can be moved.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from trtspec.builder.draft_config import DrafterFacts
from trtspec.builder.emit_sglang import ADAPTIVE_FILE, sglang_part
from trtspec.builder.emit_vllm import DRAFT_DIR, ranges_text, vllm_part
from trtspec.builder.engine_facts import EngineVersion, engine_version
from trtspec.builder.sglang_config import SglangArgs
from trtspec.builder.trtllm_config import CudaGraphConfig, KvCacheConfig, LlmApiConfig, graph_batch_sizes
from trtspec.builder.trtllm_schedule import is_static, plan_schedule, runtime_draft_len, zero_draft_batches
from trtspec.builder.vllm_config import VllmConfig

DECODING_TYPES = {"draft_model": "Draft_Target", "eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram", "sa": "SA",
                  "dflash": "DFlash", "dspark": "DSpark"}
DSPARK_SETTINGS = ("target_layer_ids", "block_size", "mask_token_id", "markov_rank")


@dataclass
class EngineConfigs:
    """The validated configs of one bundle, the engine versions they target, and what they mean there."""

    llm_api: LlmApiConfig
    vllm: Optional[VllmConfig]
    sglang: Optional[SglangArgs]
    trtllm_facts: EngineVersion
    vllm_facts: EngineVersion
    sglang_facts: EngineVersion
    meaning: dict[str, list[str]] = field(default_factory=dict)  # engine -> README lines
    notes: list[str] = field(default_factory=list)  # changes to the plan (also in the recipe's provenance)
    sglang_adaptive: Optional[dict] = None  # sglang_adaptive.json (--speculation adaptive on SGLang)

    def written(self) -> dict[str, Any]:
        return {"llm_api": self.llm_api, "vllm": self.vllm, "sglang": self.sglang, "notes": self.notes,
                "meaning": self.meaning, "configs": self}

    def cannot_serve(self) -> list[str]:
        """README lines: each engine that gets no config for this bundle, and why (from the notes)."""
        out = []
        for cfg, facts in ((self.vllm, self.vllm_facts), (self.sglang, self.sglang_facts)):
            if cfg is None:
                out += [n for n in self.notes if n.startswith(f"{facts.label} cannot serve")]
        return out


def _schedule(recipe: Any) -> Optional[dict[int, int]]:
    s = getattr(recipe, "draft_len_schedule", None)
    return {int(k): int(v) for k, v in s.items()} if s else None


def _tree(recipe: Any, drafter: str) -> Optional[tuple[int, int]]:
    """(top_k, total draft tokens) when the recipe chose a tree for an Eagle3/MTP drafter."""
    sg = getattr(recipe, "sglang", None) or {}
    k = int(sg.get("speculative_eagle_topk", 1) or 1)
    if drafter not in ("eagle3", "mtp") or k <= 1:
        return None
    total = int(sg.get("speculative_num_draft_tokens", 0)) - 1  # SGLang counts the root token
    d = int(recipe.max_draft_len)
    return k, min(max(total, d), k * d)


def _draft_len(recipe: Any, opts: Any, facts: DrafterFacts, notes: list[str]) -> int:
    """D for the engines: the DSpark checkpoint's block, vanilla MTP capped at its layers, else the recipe's."""
    d = int(recipe.max_draft_len)
    if opts.drafter == "dspark":
        block = facts.block.block_size if facts.block is not None else None
        if block is None:
            raise ValueError("--drafter dspark: the draft's block size is unknown (validate reads it from the draft's "
                             "config.json); D of a DSpark draft is its trained block, never chosen here")
        if d != block:
            notes.append(f"the recipe planned D={d}; a DSpark draft drafts its trained block, so D={block} "
                         "(the recipe only says at which batch sizes speculation pays)")
        return int(block)
    if opts.drafter == "dflash":
        cap = dflash_cap(facts)
        if cap is not None and d > cap:
            raise ValueError(f"--drafter dflash: the recipe plans D={d}, but the draft's block size is {cap + 1} (it "
                             f"drafts at most block_size - 1 = {cap} tokens per step); plan with --recipe auto, or a "
                             f"recipe whose max_draft_len is <= {cap}")
    if opts.drafter == "mtp" and (facts.mtp_layers or 1) > 1 and d > facts.mtp_layers:
        notes.append(f"the recipe planned D={d}, but vanilla MTP runs at most its {facts.mtp_layers} MTP layers: "
                     f"D={facts.mtp_layers}")
        return int(facts.mtp_layers)
    return d


def dflash_cap(facts: DrafterFacts) -> Optional[int]:
    """The largest D a DFlash draft can run: its block size - 1 (a block holds the last committed token and the
    drafted ones: SGLang's verify window is the block size, python/sglang/srt/arg_groups/speculative_hook.py@v0.5.23
    _handle_dflash); None when the draft states no block size."""
    block = facts.block.block_size if facts.block is not None and facts.block.drafter == "dflash" else None
    return None if block is None else int(block) - 1


def _dspark_losses(recipe: Any, block: int) -> list[str]:
    """Batches where the recipe predicts DSpark at its block does not pay (speedup <= 1 or D = 0 planned)."""
    rows = getattr(recipe, "rows", None) or []
    bad = [r for r in rows if int(r.get("draft_len", block)) == 0 or float(r.get("speedup", 2.0)) <= 1.0]
    return [f"{r['batch']} ({float(r.get('speedup', 0.0)):.2f}x)" for r in bad if "batch" in r]


def _dspark_fields(facts: DrafterFacts, tv: EngineVersion, spec: dict, meaning: list[str]) -> None:
    """Write a DSpark setting only where this version cannot read it from the draft's config.json."""
    block = facts.block
    if block is None:
        return
    for name in DSPARK_SETTINGS:
        s = block.settings.get(name)
        if s is None:
            continue
        found = block.read_by(name, tv["dspark_reads"][name])
        if found is not None:
            meaning.append(f"`{name}` = {s.value!r} is not written: this version reads it from draft/config.json "
                           f"(`{found}`)")
        elif name == "block_size":
            meaning.append(f"`block_size` is not written: this version reads none of {list(s.spellings)}, and an "
                           f"unset block_size is max_draft_len = {s.value}, the checkpoint's block")
        else:
            spec[name] = list(s.value) if isinstance(s.value, list) else s.value
            meaning.append(f"`{name}` = {s.value!r} is written: this version does not read {list(s.spellings)} "
                           f"(it reads {tv['dspark_reads'][name]})")


def _drafter_fields(recipe: Any, opts: Any, facts: DrafterFacts, tv: EngineVersion, spec: dict,
                    meaning: list[str]) -> None:
    """The drafter's own ``speculative_config`` fields: draft path, tree, capture / target layers, n-gram size."""
    if opts.drafter in ("draft_model", "eagle3", "dflash", "dspark"):
        spec["speculative_model"] = DRAFT_DIR
    tree = _tree(recipe, opts.drafter)
    if tree:
        spec.update(use_dynamic_tree=True, dynamic_tree_max_topK=tree[0], max_total_draft_tokens=tree[1])
    else:
        meaning.append("`max_total_draft_tokens` is not written: on a chain this version sets it to max_draft_len")
    if opts.drafter == "eagle3" and facts.layer_ids:
        spec["eagle3_layers_to_capture"] = list(facts.layer_ids)
    if opts.drafter == "dflash" and facts.layer_ids:
        spec["target_layer_ids"] = list(facts.layer_ids)
    if opts.drafter == "dspark":
        _dspark_fields(facts, tv, spec, meaning)
    if opts.drafter == "ngram":
        spec["max_matching_ngram_size"] = 3


def trtllm_part(recipe: Any, opts: Any, facts: DrafterFacts, tv: EngineVersion) -> tuple[LlmApiConfig, list, list]:
    """``llm_api.yaml`` for TensorRT-LLM ``tv``: (validated config, README lines, plan notes)."""
    notes: list[str] = []
    dtype = DECODING_TYPES[opts.drafter]
    d = _draft_len(recipe, opts, facts, notes)
    meaning = [f"{tv.summary}"]
    if opts.drafter == "dspark":
        lose = _dspark_losses(recipe, d)
        if lose:
            notes.append(f"the recipe predicts DSpark at block {d} does not pay at batch {', '.join(lose)}; "
                         f"{tv.label} cannot switch DSpark off per batch: serve with a smaller max_batch_size to "
                         "avoid those batches")
        plan = plan_schedule(decoding_type=dtype, max_draft_len=d, schedule=None, max_concurrency=None,
                             max_batch_size=opts.max_batch_size, facts=tv)
    else:
        plan = plan_schedule(decoding_type=dtype, max_draft_len=d, schedule=_schedule(recipe),
                             max_concurrency=getattr(recipe, "max_concurrency", None),
                             max_batch_size=opts.max_batch_size, facts=tv, mtp_layers=facts.mtp_layers)
    notes += list(plan.notes)
    spec: dict[str, Any] = {"decoding_type": dtype, "max_draft_len": plan.max_draft_len}
    if plan.draft_len_schedule:
        spec["draft_len_schedule"] = dict(plan.draft_len_schedule)
    if plan.max_concurrency:
        spec["max_concurrency"] = int(plan.max_concurrency)
    _drafter_fields(recipe, opts, facts, tv, spec, meaning)
    zero = zero_draft_batches(spec, tv, opts.max_batch_size, facts.mtp_layers)
    if zero:  # plan_schedule guarantees this never happens; refuse rather than emit a config that corrupts
        raise ValueError(f"{tv.label}: {dtype} would draft 0 tokens at batch {zero[0]}..{zero[-1]}, which stales its "
                         "drafter state (PR #16888)")
    per_batch = {b: runtime_draft_len(spec, b, tv, facts.mtp_layers) for b in range(1, opts.max_batch_size + 1)}
    meaning.insert(1, f"draft length per batch size: {ranges_text(per_batch)}"
                   + (" (static: this version has no per-batch draft length for it)"
                      if is_static(tv, dtype, facts.mtp_layers) else ""))
    if opts.verify == "block" and not tv["block_verification"]:
        notes.append(f"{tv.label} verifies token by token (no block verification): --verify block does "
                     "not apply to llm_api.yaml")
    cg = CudaGraphConfig(batch_sizes=graph_batch_sizes(opts.max_batch_size, plan.draft_len_schedule),
                         max_batch_size=opts.max_batch_size, enable_padding=True)
    data = {"tensor_parallel_size": opts.tp, **_trtllm_experts(opts, tv, meaning),
            "max_batch_size": opts.max_batch_size, "max_seq_len": opts.max_seq_len,
            "kv_cache_config": KvCacheConfig(dtype="fp8" if opts.kv_cache_quant == "fp8" else "auto"),
            "cuda_graph_config": cg, "speculative_config": spec}
    meaning.append(f"schedule: static per batch size on {tv.label} (no adaptive draft length: "
                   f"{tv.fact('adaptive').source.split(' (')[0] if tv.facts.get('adaptive') else 'none encoded'})")
    return LlmApiConfig.model_validate(data, context={"trtllm": tv}), meaning, notes


def _trtllm_experts(opts: Any, tv: EngineVersion, meaning: list) -> dict:
    """``moe_expert_parallel_size`` / ``moe_tensor_parallel_size`` for ``--ep`` > 1 (empty otherwise)."""
    ep = getattr(opts, "ep", 1)
    if ep <= 1:
        return {}
    fields = tv["expert_parallel"]["fields"]
    meaning.append(f"experts: `{fields[0]}: {ep}`, `{fields[1]}: {opts.tp // ep}` (their product is "
                   f"tensor_parallel_size {opts.tp})")
    return {fields[0]: ep, fields[1]: opts.tp // ep}


def plan_configs(recipe: Any, opts: Any, facts: Optional[DrafterFacts] = None) -> EngineConfigs:
    """All serving configs for ``opts`` under ``recipe``, validated for the targeted versions; nothing written."""
    facts = facts or DrafterFacts()
    tv = engine_version("trtllm", opts.trtllm_version)
    vv = engine_version("vllm", getattr(opts, "vllm_version", None))
    sv = engine_version("sglang", getattr(opts, "sglang_version", None))
    llm, t_meaning, notes = trtllm_part(recipe, opts, facts, tv)
    d = _draft_len(recipe, opts, facts, [])
    cap = {"dspark": d, "dflash": dflash_cap(facts)}.get(opts.drafter)
    if opts.drafter == "mtp" and (facts.mtp_layers or 1) > 1:
        cap = facts.mtp_layers
    vl, v_meaning, v_notes = vllm_part(recipe, opts, facts, vv, k_cap=cap)
    sg, s_meaning, s_notes, adaptive = sglang_part(recipe, opts, sv, d, facts)
    return EngineConfigs(llm_api=llm, vllm=vl, sglang=sg, trtllm_facts=tv, vllm_facts=vv, sglang_facts=sv,
                         meaning={"trtllm": t_meaning, "vllm": v_meaning, "sglang": s_meaning},
                         notes=notes + v_notes + s_notes, sglang_adaptive=adaptive)


def dump_yaml(data: dict, path: Path, header: str) -> None:
    """Write ``data`` as block-style YAML with a comment header (keys in insertion order)."""
    text = "".join(f"# {line}\n" for line in header.splitlines())
    text += yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    path.write_text(text)


def llm_api_data(llm: LlmApiConfig) -> dict:
    """The ``llm_api.yaml`` mapping: only the fields trtspec set (TensorRT-LLM's own defaults are not repeated),
    ``decoding_type`` first (it selects the class)."""
    data = llm.model_dump(exclude_none=True, exclude_unset=True)
    data["speculative_config"] = {"decoding_type": llm.speculative_config.decoding_type,
                                  **data.get("speculative_config", {})}
    return data


def write_configs(bundle: Path, recipe: Any, opts: Any, *, draft_layer_ids=None,
                  facts: Optional[DrafterFacts] = None, planned: Optional[EngineConfigs] = None) -> dict[str, Any]:
    """Write ``llm_api.yaml``, ``vllm.yaml``, ``sglang.args`` into ``bundle`` (planning them unless ``planned``);
    return ``{"llm_api", "vllm", "sglang", "notes", "meaning", "configs"}``. The plan notes are also added to the
    recipe's ``provenance["engine_notes"]`` (it is saved after this)."""
    if planned is None:
        planned = plan_configs(recipe, opts, facts or DrafterFacts(layer_ids=draft_layer_ids))
    tv = planned.trtllm_facts
    dump_yaml(llm_api_data(planned.llm_api), bundle / "llm_api.yaml",
              f"TensorRT-LLM LLM-API options (trtllm-serve ./target --config llm_api.yaml), run from the bundle.\n"
              f"Fields follow {tv.label} (llm_args.py at {tv.short_commit}); README.md says what they mean there.")
    if planned.vllm is not None:
        vv = planned.vllm_facts
        dump_yaml(planned.vllm.model_dump(exclude_none=True, mode="json"), bundle / "vllm.yaml",
                  f"vLLM options (vllm serve ./target --config vllm.yaml), run from the bundle.\n"
                  f"Keys follow {vv.label} ({vv.short_commit}).")
    if planned.sglang is not None:
        (bundle / "sglang.args").write_text(planned.sglang.to_text())
    if planned.sglang_adaptive is not None:
        (bundle / ADAPTIVE_FILE).write_text(json.dumps(planned.sglang_adaptive, indent=2) + "\n")
    prov = getattr(recipe, "provenance", None)
    if isinstance(prov, dict) and planned.notes:
        prov["engine_notes"] = list(planned.notes)
    return planned.written()


def _context_lines(opts: Any, recipe: Any) -> list[str]:
    """README section: the context the schedule was planned for, and how to plan other context buckets."""
    planned, seq = getattr(recipe, "context", None), getattr(opts, "max_seq_len", None)
    if planned is None:
        return []
    lines = ["", "## Context", "",
             f"- The draft lengths above (TensorRT-LLM `draft_len_schedule`, vLLM's and SGLang's) were planned for "
             f"{planned} tokens of context per request" + (f" (`--max-seq-len {seq}`)." if seq == planned else ".")]
    if seq is not None and seq != planned:
        lines.append(f"- The recipe's context ({planned}) is not this bundle's `--max-seq-len` ({seq}): the served "
                     "context differs from the planned one.")
    lines += ["- TensorRT-LLM's schedule has a batch axis only. At longer contexts verification reads more KV cache "
              "per draft token, so the best D shrinks; compare context buckets with "
              f"`trtspec plan --model ./target --gpu {opts.gpu} --tp {opts.tp} --quant {opts.quant} --drafter "
              f"{opts.drafter} --acceptance SOURCE --context 1k,8k,32k` (SOURCE: the acceptance in recipe.yaml's "
              "`provenance`) and rebuild with the `--max-seq-len` of the bucket you serve."]
    return lines


def _uncertainty_lines(recipe: Any) -> list[str]:
    """README section: the batches whose predicted speedup interval reaches below 1 (trtspec.recipes.intervals)."""
    low = [r for r in getattr(recipe, "rows", []) or [] if r.get("draft_len", 0) > 0 and len(r.get("interval") or ()) == 2
           and r["interval"][0] < 1.0]
    if not low:
        return []
    cells = ", ".join(f"batch {r['batch']}: D={r['draft_len']} {r['speedup']:.2f}x ({r['interval'][0]:.2f}-"
                      f"{r['interval'][1]:.2f})" for r in low)
    return ["", "## Uncertainty", "",
            f"- The predicted speedup may be below 1 (speculation may lose) at {cells}: the interval is the range of "
            "the planner's errors on published measurements it was not fitted on (`provenance.intervals` in "
            "recipe.yaml).",
            f"- Settle it on your deployment: {low[0].get('settle') or '`trtspec bench --server URL --draft-len D`'}."]


def readme(opts: Any, written: dict[str, Any], recipe: Any, extra: list[str]) -> str:
    """The bundle's ``README.md``: what is inside, the exact serve commands, and per engine what the config
    means on the version it targets."""
    cfg: EngineConfigs = written["configs"]
    spec = cfg.llm_api.speculative_config
    tv, vv, sv = cfg.trtllm_facts, cfg.vllm_facts, cfg.sglang_facts
    lines = ["# trtspec bundle", "",
             f"Target quantization `{opts.quant}`, KV cache `{opts.kv_cache_quant}`, drafter `{opts.drafter}`"
             f" (TensorRT-LLM `decoding_type: {spec.decoding_type}`), planned for {opts.gpu} x{opts.tp}, "
             f"verification `{opts.verify}`.", "",
             "Run every command from this directory (paths in the configs are relative to it).", "",
             f"## TensorRT-LLM ({tv.label}, llm_args.py at {tv.short_commit})", "```bash",
             "trtllm-serve ./target --config llm_api.yaml", "```",
             "or in Python: `tensorrt_llm.LLM(model='./target', **yaml.safe_load(open('llm_api.yaml')))`.", ""]
    lines += [f"- {m}" for m in cfg.meaning["trtllm"]]
    if cfg.vllm is not None:
        lines += ["", f"## vLLM ({vv.label}, {vv.short_commit})", "```bash",
                  "vllm serve ./target --config vllm.yaml", "```", ""]
        lines += [f"- {m}" for m in cfg.meaning["vllm"]]
    if cfg.sglang is not None:
        lines += ["", f"## SGLang ({sv.label}, {sv.short_commit})", "```bash",
                  "python -m sglang.launch_server $(cat sglang.args)", "```", ""]
        lines += [f"- {m}" for m in cfg.meaning["sglang"]]
    gone = cfg.cannot_serve()
    if gone:
        lines += ["", "## Engines that cannot serve this bundle", ""] + [f"- {n}" for n in gone]
    lines += _context_lines(opts, recipe)
    lines += _uncertainty_lines(recipe)
    if cfg.notes:
        lines += ["", "## Changes to the plan", ""] + [f"- {n}" for n in cfg.notes]
    lines += ["", "## Files", "- `target/`: target checkpoint (unified Hugging Face layout"
              + (", Model-Optimizer quantized)" if opts.quant != "none" or opts.kv_cache_quant != "none" else ")")]
    if opts.drafter in ("draft_model", "eagle3", "dflash", "dspark"):
        lines.append("- `draft/`: draft checkpoint" + (f" ({opts.draft_quant})" if opts.draft_quant != "none" else ""))
    lines += ["- `recipe.yaml`: the recipe (draft length per batch, predicted speedups, binding rules; "
              "`provenance.engine_notes` repeats the changes above)",
              "- `manifest.json`: sha256 of inputs and of every file here, tool versions"]
    for note in extra:
        lines.append(f"- note: {note}")
    return "\n".join(lines) + "\n"
