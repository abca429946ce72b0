"""Export the target verification step and the drafter's step to ONNX with trtspec plugin nodes.

``torch.onnx.export(..., dynamo=True)`` traces the graphs of :mod:`trtspec.onnx.graphs` with
``torch.export`` and translates the export ops (:mod:`trtspec.onnx.export_ops`) into the custom
nodes of domain ``trtspec`` (``plugin_version`` / ``plugin_namespace`` attributes: how TensorRT's
ONNX parser finds the IPluginV3 creators of ``libtrtspec_plugins.so``). The OpSchemas built from the
plugins' interface YAMLs are registered first, so every graph passes ``onnx.checker``'s full check.

Every axis that varies at run time is dynamic: the batch ``B``, the tree size ``N`` (one target
graph serves every batch tier of a recipe, each tier with its own tree: see
:mod:`trtspec.onnx.tiers`), the past length ``P`` and the draft step's new tokens ``T``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtspec.onnx.qdq import QUANT_FORMATS
from trtspec.onnx.tiers import ExportError, check_tree_size

OPSET = 18
"""ONNX opset of the exported graphs."""
FORMAT = "trtspec.onnx_bundle/v2"
DRAFTERS = ("draft_model", "eagle3", "dflash", "dspark")
#: drafters whose step graph takes the target's captured layers (the target graph then outputs ``aux_hidden``)
CAPTURING = ("eagle3", "dflash", "dspark")
VERIFY = ("greedy", "sample", "block")
"""Verification modes the target graph can end in (TrtSpecVerifyGreedy / TrtSpecVerifySample / TrtSpecVerifyBlock)."""
SAMPLED_INPUTS = ("draft_probs", "draft_lens", "seed", "offset", "temperature", "top_k", "top_p")
"""The sampled target graph's inputs after the greedy one's (see :class:`trtspec.onnx.graphs.SampledVerifyStep`)."""


@dataclass(frozen=True)
class ExportSpec:
    """What was exported, written next to the graphs as ``onnx_spec.json``.

    max_nodes: the largest tree (root included) the graphs are meant for, 2..the plugins' limit;
    the graphs themselves take any N (the engines' profiles bound it).
    drafter: draft_model (``draft_step.onnx``), eagle3 (``eagle3_step.onnx``) or dflash / dspark
    (``dflash_step.onnx`` / ``dspark_step.onnx``, :mod:`trtspec.onnx.graphs_block`); for the last three the
    target graph also outputs ``aux_hidden``, the outputs of ``aux_layer_ids`` (EAGLE-3's aux layers, a
    block head's ``target_layer_ids``).
    draft_*: the draft model's, or the EAGLE-3 head's, KV layout (1 layer) and hidden size.
    sort_width: sample/block graphs: candidates of the in-graph top-k / top-p (``top_k`` must not
    exceed it; see :mod:`trtspec.onnx.sampling_graph`); 0 for greedy graphs.
    context: the target's max_position_embeddings. block_size: a block head's (0 otherwise).
    """

    max_nodes: int
    num_layers: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    draft_num_layers: int
    draft_kv_heads: int
    draft_head_dim: int
    draft_hidden_size: int
    verify: str = "greedy"
    drafter: str = "draft_model"
    aux_layer_ids: tuple[int, ...] = field(default=())
    draft_vocab_size: int = 0
    sort_width: int = 0
    context: int = 0
    block_size: int = 0
    quant: str = "none"
    opset: int = OPSET
    format: str = FORMAT

    def __post_init__(self):
        if self.verify not in VERIFY:
            raise ExportError(f"verify must be one of {VERIFY}, got {self.verify!r}")
        if self.drafter not in DRAFTERS:
            raise ExportError(f"drafter must be one of {DRAFTERS}, got {self.drafter!r}")
        check_tree_size(self.max_nodes, self.verify)
        if self.quant not in QUANT_FORMATS:
            raise ExportError(f"quant must be one of {QUANT_FORMATS}, got {self.quant!r}")
        if (self.drafter in CAPTURING) != bool(self.aux_layer_ids):
            raise ExportError(f"aux_layer_ids are given exactly when drafter is one of {CAPTURING}")
        if self.drafter in CAPTURING and self.verify != "greedy":
            raise ExportError(f"{self.drafter} step graphs export with --verify greedy (got {self.verify!r}): the "
                              "head's sampled drafting is not part of its exported graph")
        if (self.verify == "greedy") != (self.sort_width == 0):
            raise ExportError(f"sort_width is set exactly for sampled graphs (verify={self.verify!r}, "
                              f"sort_width={self.sort_width})")

    @property
    def draft_graph(self) -> str:
        return f"{self.drafter}_step.onnx" if self.drafter in CAPTURING else "draft_step.onnx"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, onnx_dir: str | Path) -> "ExportSpec":
        path = Path(onnx_dir) / "onnx_spec.json"
        d = json.loads(path.read_text())
        if d.get("format") != FORMAT:
            raise ExportError(f"{path}: format {d.get('format')!r}, expected {FORMAT!r} (re-export the graphs)")
        d["aux_layer_ids"] = tuple(d.get("aux_layer_ids") or ())
        return cls(**d)


def _export(module, args, path: Path, input_names, output_names, dynamic: dict) -> None:
    """dynamo export of ``module(*args)``; ``dynamic``: input name -> {axis: dim name}."""
    import torch

    from trtspec.onnx.export_ops import translation_table

    register_all_schemas()                       # the translations look the custom nodes' schemas up
    dims: dict = {}
    shapes = {n: {a: dims.setdefault(d, torch.export.Dim(d)) for a, d in dynamic.get(n, {}).items()} or None
              for n in input_names}
    with torch.no_grad():
        program = torch.onnx.export(module.eval(), args, None, dynamo=True, opset_version=OPSET,
                                    input_names=list(input_names), output_names=list(output_names),
                                    dynamic_shapes=shapes, custom_translation_table=translation_table(),
                                    verbose=False)
    program.save(str(path))


def register_all_schemas() -> None:
    """The trtspec plugin OpSchemas (from the interface YAMLs) and the ``trt`` Q/DQ ones."""
    from trtspec.onnx.qdq import register_trt_schemas
    from trtspec.onnx_schemas import register_schemas

    register_schemas()
    register_trt_schemas()


def check_graph(path: str | Path) -> None:
    """``onnx.checker`` with ``full_check`` (shape inference included), every custom schema registered."""
    import onnx

    register_all_schemas()
    onnx.checker.check_model(str(path), full_check=True)


def _load_pair(target_dir, draft_dir, drafter: str):
    from trtspec.runtime.config import ModelFormatError
    from trtspec.runtime.block_head import load_block_head
    from trtspec.runtime.models import load_eagle3, load_model

    try:
        target = load_model(target_dir)
        if drafter in ("dflash", "dspark"):
            draft = load_block_head(draft_dir, target)
            if draft.config.drafter != drafter:
                raise ModelFormatError(f"{draft_dir}: a {draft.config.drafter} head, not {drafter}")
        else:
            draft = load_eagle3(draft_dir, target) if drafter == "eagle3" else load_model(draft_dir)
    except ModelFormatError as e:
        raise ExportError(f"cannot export: {e}") from e
    if drafter == "draft_model" and draft.config.vocab_size != target.config.vocab_size:
        raise ExportError(f"draft vocab_size {draft.config.vocab_size} differs from the target's "
                          f"{target.config.vocab_size}")
    return target, draft


def _spec(target, draft, drafter, **kw) -> ExportSpec:
    tc = target.config
    dc = draft.config.layer if drafter in CAPTURING else draft.config
    extra = {}
    if drafter == "eagle3":
        extra = {"aux_layer_ids": tuple(draft.config.aux_layer_ids), "draft_vocab_size": draft.config.draft_vocab_size}
    elif drafter in CAPTURING:
        extra = {"aux_layer_ids": tuple(draft.config.target_layer_ids), "block_size": draft.config.block_size}
    if kw.get("verify", "greedy") != "greedy":
        from trtspec.onnx.sampling_graph import sort_width

        extra["sort_width"] = sort_width(tc.vocab_size)
    return ExportSpec(num_layers=tc.num_hidden_layers, kv_heads=tc.num_key_value_heads, head_dim=tc.head_dim,
                      hidden_size=tc.hidden_size, vocab_size=tc.vocab_size, context=tc.max_position_embeddings,
                      draft_num_layers=1 if drafter == "eagle3" else dc.num_hidden_layers,
                      draft_kv_heads=dc.num_key_value_heads, draft_head_dim=dc.head_dim,
                      draft_hidden_size=dc.hidden_size, drafter=drafter, **extra, **kw)


def _write_graphs(target, draft, spec: ExportSpec, out: Path) -> None:
    import torch

    from trtspec.onnx.graphs import DraftStep, Eagle3DraftStep, SampledDraftStep, SampledVerifyStep, TargetVerifyStep

    B, N, P, T = 2, 5, 3, 4                      # example sizes; all four axes are exported dynamic
    s = spec
    chain = torch.tensor([[-1] + list(range(N - 1))] * B, dtype=torch.int32)
    # past_v is always a separate tensor: torch.export treats one tensor passed twice as one input
    kv = torch.zeros(s.num_layers, B, s.kv_heads, P, s.head_dim)
    aux = ["aux_hidden"] if s.aux_layer_ids else []
    args = (torch.zeros(B, N, dtype=torch.int64), chain, torch.full((B,), P, dtype=torch.int64), kv, kv.clone())
    names = ["tokens", "parents", "cache_lens", "past_k", "past_v"]
    axes = {"tokens": {0: "B", 1: "N"}, "parents": {0: "B", 1: "N"}, "cache_lens": {0: "B"},
            "past_k": {1: "B", 3: "P"}, "past_v": {1: "B", 3: "P"}}
    transform = (torch.ones(B), torch.zeros(B, dtype=torch.int64), torch.ones(B))   # temperature, top_k, top_p
    if s.verify == "greedy":
        module = TargetVerifyStep(target, s.aux_layer_ids)
    else:
        module = SampledVerifyStep(target, s.aux_layer_ids, verify=s.verify, width=s.sort_width)
        args += (torch.full((B, N - 1, s.vocab_size), 1.0 / s.vocab_size), torch.full((B,), N - 1, dtype=torch.int32),
                 torch.zeros(B, dtype=torch.int64), torch.zeros(B, dtype=torch.int64), *transform)
        names += list(SAMPLED_INPUTS)
        axes.update({"draft_probs": {0: "B", 1: "D"}, **{n: {0: "B"} for n in SAMPLED_INPUTS[1:]}})
    _export(module, args, out / "target_verify.onnx", names,
            ["accepted_len", "accepted_nodes", "bonus_token", "new_k", "new_v", *aux], axes)
    dkv = torch.zeros(s.draft_num_layers, B, s.draft_kv_heads, P, s.draft_head_dim)
    toks, lens = torch.zeros(B, T, dtype=torch.int64), torch.full((B,), P, dtype=torch.int64)
    kv_axes = {"past_k": {1: "B", 3: "P"}, "past_v": {1: "B", 3: "P"}}
    if s.verify != "greedy":                     # the draft model's next-token distribution, in the graph
        _export(SampledDraftStep(draft, s.sort_width), (toks, lens, dkv, dkv.clone(), *transform), out / s.draft_graph,
                ["tokens", "cache_lens", "past_k", "past_v", "temperature", "top_k", "top_p"],
                ["logits", "probs", "new_k", "new_v"],
                {"tokens": {0: "B", 1: "T"}, "cache_lens": {0: "B"}, **kv_axes,
                 **{n: {0: "B"} for n in ("temperature", "top_k", "top_p")}})
        return
    if s.drafter in ("dflash", "dspark"):
        from trtspec.onnx.graphs_block import BlockDraftStep

        k_e = len(s.aux_layer_ids) * s.hidden_size
        _export(BlockDraftStep(draft, target),
                (torch.zeros(B, dtype=torch.int64), torch.zeros(B, T, k_e), torch.full((B,), T, dtype=torch.int64),
                 lens, dkv, dkv.clone()),
                out / s.draft_graph, ["roots", "aux_hidden", "new_lens", "cache_lens", "past_k", "past_v"],
                ["drafts", "new_k", "new_v"],
                {"roots": {0: "B"}, "aux_hidden": {0: "B", 1: "T"}, "new_lens": {0: "B"}, "cache_lens": {0: "B"},
                 **kv_axes})
    elif s.drafter == "eagle3":
        k_e = len(s.aux_layer_ids) * s.hidden_size
        _export(Eagle3DraftStep(draft, target),
                (toks, torch.zeros(B, T, k_e), torch.zeros(B, T, s.draft_hidden_size),
                 torch.ones(B, T, dtype=torch.bool), lens, dkv, dkv.clone()),
                out / s.draft_graph, ["tokens", "aux_hidden", "hidden", "from_aux", "cache_lens", "past_k", "past_v"],
                ["logits", "next_token", "hidden_out", "new_k", "new_v"],
                {"tokens": {0: "B", 1: "T"}, "aux_hidden": {0: "B", 1: "T"}, "hidden": {0: "B", 1: "T"},
                 "from_aux": {0: "B", 1: "T"}, "cache_lens": {0: "B"}, **kv_axes})
    else:
        _export(DraftStep(draft), (toks, lens, dkv, dkv.clone()), out / s.draft_graph,
                ["tokens", "cache_lens", "past_k", "past_v"], ["logits", "new_k", "new_v"],
                {"tokens": {0: "B", 1: "T"}, "cache_lens": {0: "B"}, **kv_axes})


def export_step_graphs(target_dir: str | Path, draft_dir: str | Path, out_dir: str | Path, *,
                       max_nodes: int = 5, verify: str = "greedy", drafter: str = "draft_model",
                       quant: str = "none", calib: list[list[int]] | None = None) -> ExportSpec:
    """Write ``target_verify.onnx``, the drafter's step graph and ``onnx_spec.json`` into ``out_dir``.

    Args:
        target_dir, draft_dir: Hugging Face directories of a supported Llama-family target and its
            draft model (``drafter="draft_model"``), EAGLE-3 head (``drafter="eagle3"``) or DFlash / DSpark
            head (``drafter="dflash"`` / ``"dspark"``; the graph drafts the whole block, D = its drafts).
        max_nodes: the largest tree N the graphs serve (default 5: a chain of 4 drafts); checked
            against the plugins' limits.
        verify: the verification node the target graph ends in (see :data:`VERIFY`).
        quant: one of :data:`trtspec.onnx.qdq.QUANT_FORMATS`; not ``none``: the target's (and a draft
            model's) linear layers are fake-quantized with Model-Optimizer and export as Q/DQ.
        calib: token-id sequences the quantizers calibrate on (default: random ids, see
            :func:`trtspec.onnx.qdq.quantize_for_export`).

    Everything is checked before any model loads; the directory is written atomically.
    """
    if quant not in QUANT_FORMATS:
        raise ExportError(f"quant must be one of {QUANT_FORMATS}, got {quant!r}")
    if drafter not in DRAFTERS:
        raise ExportError(f"drafter must be one of {DRAFTERS}, got {drafter!r}")
    if drafter in CAPTURING and verify != "greedy":
        raise ExportError(f"{drafter} step graphs export with --verify greedy (got {verify!r}): the head's sampled "
                          "drafting is not part of its exported graph")
    check_tree_size(max_nodes, verify)
    target, draft = _load_pair(target_dir, draft_dir, drafter)
    spec = _spec(target, draft, drafter, max_nodes=max_nodes, verify=verify, quant=quant)
    quantized = [target] + ([draft] if drafter == "draft_model" else [])
    bad = [m.config for m in quantized if m.config.hidden_size % 128 or m.config.intermediate_size % 128]
    if quant == "int4_awq" and bad:
        raise ExportError(f"int4_awq needs hidden and intermediate sizes that are multiples of 128, got "
                          f"{bad[0].hidden_size} and {bad[0].intermediate_size}")
    if quant != "none":
        from trtspec.onnx.qdq import quantize_for_export, to_qdq

        for m in quantized:
            quantize_for_export(m, quant, calib)
        target = to_qdq(target)
        draft = to_qdq(draft) if drafter == "draft_model" else draft
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        _write_graphs(target, draft, spec, tmp)
        for name in ("target_verify.onnx", spec.draft_graph):
            check_graph(tmp / name)
        spec.save(tmp / "onnx_spec.json")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return spec
