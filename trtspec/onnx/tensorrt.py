"""The TensorRT engine backend of a bundle: ONNX graphs + plugins -> engines, or a script to build them.

``write_tensorrt_backend`` exports the step graphs into ``<bundle>/tensorrt/`` and then either
builds the engines with the TensorRT Python API (when ``tensorrt`` imports and the trtspec plugin
library is found) or writes ``build_engines.sh``, which runs ``trtexec`` with the plugin library,
and says plainly that engines need TensorRT and a GPU. Either way it writes ``runtime_config.json``.

The target engine has one optimization profile per batch tier of the recipe
(:func:`trtspec.onnx.tiers.tiers_from_recipe`): batch min/opt/max of the tier, its tree's N fixed,
past length 1..max_seq_len; plus a ``prefill`` profile (one request, up to ``max_nodes`` new tokens
per call). The draft engine has one profile over every batch. ``runtime_config.json`` lists the
tiers with the engine and profile index that serve each batch range.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from trtspec.onnx.export import ExportSpec, export_step_graphs
from trtspec.onnx.tiers import ExportError, Tier

PLUGIN_LIBRARY = "libtrtspec_plugins.so"
RUNTIME_FORMAT = "trtspec.tensorrt_runtime/v2"

Shapes = dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


def _kv(layers, heads, dim):
    return lambda b, p: (layers, b, heads, p, dim)


def target_profile(s: ExportSpec, lo: int, opt: int, hi: int, nodes: tuple[int, int, int], max_seq_len: int) -> Shapes:
    """input -> (min, opt, max) shapes of target_verify.onnx for batches lo..hi and trees of ``nodes`` (min, opt, max)."""
    kv = _kv(s.num_layers, s.kv_heads, s.head_dim)
    past = (kv(lo, 1), kv(opt, max(1, max_seq_len // 2)), kv(hi, max_seq_len))
    b = (lo, opt, hi)
    shapes: Shapes = {"tokens": tuple((b[i], nodes[i]) for i in range(3)),
                      "parents": tuple((b[i], nodes[i]) for i in range(3)),
                      "cache_lens": tuple((x,) for x in b), "past_k": past, "past_v": past}
    if s.verify != "greedy":   # the sampled graph's inputs (trtspec.onnx.export.SAMPLED_INPUTS)
        shapes["draft_probs"] = tuple((b[i], nodes[i] - 1, s.vocab_size) for i in range(3))
        shapes.update({n: tuple((x,) for x in b) for n in ("draft_lens", "seed", "offset", "temperature", "top_k", "top_p")})
    return shapes


def draft_profile(s: ExportSpec, max_batch: int, max_seq_len: int) -> Shapes:
    """input -> (min, opt, max) shapes of the drafter's step graph (T new tokens: 1..max_seq_len)."""
    opt = max(1, max_batch // 2)
    kv = _kv(s.draft_num_layers, s.draft_kv_heads, s.draft_head_dim)
    past = (kv(1, 1), kv(opt, max(1, max_seq_len // 2)), kv(max_batch, max_seq_len))
    bt = ((1, 1), (opt, 1), (max_batch, max_seq_len))
    shapes: Shapes = {"tokens": bt}
    if s.drafter == "eagle3":
        k_e = len(s.aux_layer_ids) * s.hidden_size
        shapes.update({"aux_hidden": tuple((*x, k_e) for x in bt), "hidden": tuple((*x, s.draft_hidden_size) for x in bt),
                       "from_aux": bt})
    shapes.update({"cache_lens": ((1,), (opt,), (max_batch,)), "past_k": past, "past_v": past})
    if s.verify != "greedy":   # the in-graph sampling transform's per-request parameters
        shapes.update({n: ((1,), (opt,), (max_batch,)) for n in ("temperature", "top_k", "top_p")})
    return shapes


def target_profiles(s: ExportSpec, tiers: list[Tier], max_seq_len: int) -> list[dict]:
    """One profile per tier (its batch range, its tree's N), then the prefill profile."""
    out = [{"name": f"batch {t.lo}-{t.hi}", "batch": [t.lo, t.hi], "draft_len": t.draft_len, "num_nodes": t.num_nodes,
            "topk": t.topk, "shapes": target_profile(s, t.lo, t.opt_batch, t.hi, (t.num_nodes,) * 3, max_seq_len)}
           for t in tiers]
    out.append({"name": "prefill", "batch": [1, 1], "num_nodes": [1, s.max_nodes],
                "shapes": target_profile(s, 1, 1, 1, (1, s.max_nodes, s.max_nodes), max_seq_len)})
    return out


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def trtexec_command(onnx_name: str, profiles: list[Shapes], plugin_lib: str, fp16: bool) -> str:
    """The ``trtexec`` command building ``<name>.plan`` from ``<name>.onnx`` with the plugins loaded and one
    ``--profile=i --minShapes --optShapes --maxShapes`` group per profile (trtexec's multi-profile syntax,
    NVIDIA/TensorRT samples/common/sampleOptions.cpp ``getOptimizationProfiles``)."""
    plan = onnx_name.replace(".onnx", ".plan")
    args = ["trtexec", f"--onnx={onnx_name}", f"--saveEngine={plan}", f"--staticPlugins={plugin_lib}"]
    for i, shapes in enumerate(profiles):
        args.append(f"--profile={i}")
        for flag, k in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
            args.append(f"{flag}=" + ",".join(f"{name}:{_dims(v[k])}" for name, v in shapes.items()))
    args.append("--fp16" if fp16 else "--stronglyTyped")
    return " \\\n    ".join(f'"{a}"' if "$" in a else a for a in args)   # keep $TRTSPEC_PLUGIN_LIB expandable


def _script(commands: list[str]) -> str:
    return "\n".join([
        "#!/usr/bin/env bash",
        "# Build the TensorRT engines of this bundle (needs TensorRT's trtexec and a GPU).",
        "# The trtspec plugin library comes from the trtspec sources:",
        "#   cmake -S plugins -B build/plugins -DTENSORRT_ROOT=/path/to/TensorRT && cmake --build build/plugins -j",
        f"# then point TRTSPEC_PLUGIN_LIB at build/plugins/{PLUGIN_LIBRARY} (default: ./{PLUGIN_LIBRARY}).",
        "# Profiles of target_verify.plan: see runtime_config.json (tiers -> profile index).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'TRTSPEC_PLUGIN_LIB="${{TRTSPEC_PLUGIN_LIB:-./{PLUGIN_LIBRARY}}}"',
        'if [ ! -f "$TRTSPEC_PLUGIN_LIB" ]; then echo "plugin library $TRTSPEC_PLUGIN_LIB not found" >&2; exit 1; fi',
        *commands, ""])


def _build_engines_with_tensorrt(out: Path, graphs: dict[str, list[Shapes]], plugin_lib: Path, fp16: bool):
    """Build every plan with the TensorRT Python API (parse, one optimization profile per entry, serialize)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    trt.get_plugin_registry().load_library(str(plugin_lib))
    for name, profiles in graphs.items():
        builder = trt.Builder(logger)
        # Q/DQ graphs are built strongly typed: the precisions are the graph's, not the builder's
        flags = 0 if fp16 else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(out / name)):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise RuntimeError(f"TensorRT could not parse {name}: {errors}")
        config = builder.create_builder_config()
        if fp16:
            config.set_flag(trt.BuilderFlag.FP16)
        for shapes in profiles:
            prof = builder.create_optimization_profile()
            for tensor, (lo, opt, hi) in shapes.items():
                prof.set_shape(tensor, lo, opt, hi)
            config.add_optimization_profile(prof)
        plan = builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError(f"TensorRT failed to build an engine for {name}")
        (out / name.replace(".onnx", ".plan")).write_bytes(bytes(plan))


def _find_plugin_library() -> Path | None:
    env = os.environ.get("TRTSPEC_PLUGIN_LIB")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "build" / "plugins" / PLUGIN_LIBRARY)
    return next((c for c in candidates if c.is_file()), None)


def tensorrt_available() -> bool:
    """True when the ``tensorrt`` Python package imports (it needs libnvinfer)."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return False
    return True


def _listed(shapes: Shapes) -> dict:
    return {k: [list(x) for x in v] for k, v in shapes.items()}


def write_tensorrt_backend(target_dir, draft_dir, out_dir, *, tiers: list[Tier], verify: str = "greedy",
                           drafter: str = "draft_model", quant: str = "none", max_seq_len: int = 2048,
                           fp16: bool = True, calib: list[list[int]] | None = None, log=print) -> dict:
    """Export the step graphs into ``out_dir`` and build engines or write ``build_engines.sh``.

    ``tiers``: the batch tiers (:func:`trtspec.onnx.tiers.tiers_from_recipe`), contiguous from batch 1;
    the graphs are exported for the largest tier tree. ``quant``
    (:data:`trtspec.onnx.qdq.QUANT_FORMATS`) puts Model-Optimizer Q/DQ nodes in the graphs; TensorRT
    then builds strongly typed engines (``--stronglyTyped``) instead of ``--fp16``; ``calib``: the
    token-id sequences its quantizers calibrate on.
    Returns the runtime config written to ``out_dir/runtime_config.json``.
    """
    if not tiers or tiers[0].lo != 1 or any(a.hi + 1 != b.lo for a, b in zip(tiers, tiers[1:])):
        raise ExportError(f"tiers must cover batches 1..max contiguously, got {[(t.lo, t.hi) for t in tiers]}")
    if max_seq_len < 2:
        raise ExportError(f"max_seq_len must be >= 2, got {max_seq_len}")
    max_nodes = max(t.num_nodes for t in tiers)
    if max_nodes < 2:
        raise ExportError("no tier drafts: every batch tier has D = 0 (nothing to verify)")
    fp16 = fp16 and quant == "none"
    out_dir = Path(out_dir)
    spec = export_step_graphs(target_dir, draft_dir, out_dir, max_nodes=max_nodes, verify=verify, drafter=drafter,
                              quant=quant, calib=calib)
    tprofiles = target_profiles(spec, tiers, max_seq_len)
    dshapes = draft_profile(spec, tiers[-1].hi, max_seq_len)
    graphs = {"target_verify.onnx": [p["shapes"] for p in tprofiles], spec.draft_graph: [dshapes]}
    plugin = _find_plugin_library()
    engines = False
    if tensorrt_available() and plugin is not None:
        _build_engines_with_tensorrt(out_dir, graphs, plugin, fp16)
        engines = True
        log(f"built TensorRT engines {', '.join(g.replace('.onnx', '.plan') for g in graphs)} with {plugin}")
    else:
        why = "the tensorrt package is not importable" if not tensorrt_available() else f"{PLUGIN_LIBRARY} was not found"
        script = out_dir / "build_engines.sh"
        script.write_text(_script([trtexec_command(g, p, "$TRTSPEC_PLUGIN_LIB", fp16) for g, p in graphs.items()]))
        script.chmod(0o755)
        log(f"engines not built: {why}; TensorRT engines need TensorRT and a GPU. "
            f"Run {script} on a machine that has them.")
    draft_name = spec.draft_graph.removesuffix(".onnx")
    config = {
        "format": RUNTIME_FORMAT, "engines_built": engines, "plugin_library": PLUGIN_LIBRARY,
        "plugin_namespace": "trtspec", "verify": verify, "drafter": drafter, "max_nodes": spec.max_nodes,
        "sort_width": spec.sort_width,
        "fp16": fp16, "quant": quant,
        "tiers": [{"batch": [t.lo, t.hi], "draft_len": t.draft_len, "num_nodes": t.num_nodes, "topk": t.topk,
                   "engine": "target_verify.plan", "profile": i} for i, t in enumerate(tiers)],
        "graphs": {"target_verify": {"onnx": "target_verify.onnx", "plan": "target_verify.plan",
                                     "profiles": [{**{k: v for k, v in p.items() if k != "shapes"}, "index": i,
                                                   "shapes": _listed(p["shapes"])} for i, p in enumerate(tprofiles)]},
                   draft_name: {"onnx": spec.draft_graph, "plan": f"{draft_name}.plan",
                                "profiles": [{"name": f"batch 1-{tiers[-1].hi}", "index": 0, "shapes": _listed(dshapes)}]}},
    }
    (out_dir / "runtime_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config
