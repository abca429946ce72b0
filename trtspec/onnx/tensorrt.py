"""The TensorRT engine backend of a bundle: ONNX graphs + plugins -> engines, or a script to build them.

``write_tensorrt_backend`` exports the step graphs into ``<bundle>/tensorrt/`` and then either
builds the engines with the TensorRT Python API (when ``tensorrt`` imports and the trtspec plugin
library is found) or writes ``build_engines.sh``, which runs ``trtexec`` with the plugin library,
and says plainly that engines need TensorRT. Either way it writes ``runtime_config.json``: the
graphs' tensors, the shape profiles and the plugin library the engines need at run time.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from trtspec.onnx.export import ExportSpec, export_step_graphs

PLUGIN_LIBRARY = "libtrtspec_plugins.so"


@dataclass(frozen=True)
class Profile:
    """TensorRT optimization profile bounds: batch 1..max_batch, past length 1..max_seq_len."""

    max_batch: int
    max_seq_len: int

    def __post_init__(self):
        if self.max_batch < 1 or self.max_seq_len < 2:
            raise ValueError(f"max_batch must be >= 1 and max_seq_len >= 2, got {self.max_batch}, {self.max_seq_len}")

    def target_shapes(self, s: ExportSpec) -> dict[str, tuple[tuple[int, ...], ...]]:
        """input -> (min, opt, max) shapes of target_verify.onnx."""
        n, kv = s.max_nodes, (s.num_layers, s.kv_heads, s.head_dim)
        opt_b, opt_p = max(1, self.max_batch // 2), max(1, self.max_seq_len // 2)

        def past(b, p):
            return (kv[0], b, kv[1], p, kv[2])

        return {"tokens": ((1, n), (opt_b, n), (self.max_batch, n)),
                "parents": ((1, n), (opt_b, n), (self.max_batch, n)),
                "cache_lens": ((1,), (opt_b,), (self.max_batch,)),
                "past_k": (past(1, 1), past(opt_b, opt_p), past(self.max_batch, self.max_seq_len)),
                "past_v": (past(1, 1), past(opt_b, opt_p), past(self.max_batch, self.max_seq_len))}

    def draft_shapes(self, s: ExportSpec) -> dict[str, tuple[tuple[int, ...], ...]]:
        """input -> (min, opt, max) shapes of draft_step.onnx (T new tokens: 1..max_seq_len)."""
        opt_b, opt_p = max(1, self.max_batch // 2), max(1, self.max_seq_len // 2)

        def past(b, p):
            return (s.draft_num_layers, b, s.draft_kv_heads, p, s.draft_head_dim)

        return {"tokens": ((1, 1), (opt_b, 1), (self.max_batch, self.max_seq_len)),
                "cache_lens": ((1,), (opt_b,), (self.max_batch,)),
                "past_k": (past(1, 1), past(opt_b, opt_p), past(self.max_batch, self.max_seq_len)),
                "past_v": (past(1, 1), past(opt_b, opt_p), past(self.max_batch, self.max_seq_len))}


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def trtexec_command(onnx_name: str, shapes: dict, plugin_lib: str, fp16: bool) -> str:
    """The ``trtexec`` command line building ``<name>.plan`` from ``<name>.onnx`` with the plugins loaded."""
    plan = onnx_name.replace(".onnx", ".plan")
    args = ["trtexec", f"--onnx={onnx_name}", f"--saveEngine={plan}", f"--staticPlugins={plugin_lib}"]
    for flag, k in (("--minShapes", 0), ("--optShapes", 1), ("--maxShapes", 2)):
        args.append(f"{flag}=" + ",".join(f"{name}:{_dims(v[k])}" for name, v in shapes.items()))
    args.append("--fp16" if fp16 else "--stronglyTyped")
    return " ".join(f'"{a}"' if "$" in a else a for a in args)   # keep $TRTSPEC_PLUGIN_LIB expandable


def _script(commands: list[str]) -> str:
    return "\n".join([
        "#!/usr/bin/env bash",
        "# Build the TensorRT engines of this bundle (needs TensorRT's trtexec and a GPU).",
        "# The trtspec plugin library comes from the trtspec sources:",
        "#   cmake -S plugins -B build/plugins -DTENSORRT_ROOT=/path/to/TensorRT && cmake --build build/plugins -j",
        f"# then point TRTSPEC_PLUGIN_LIB at build/plugins/{PLUGIN_LIBRARY} (default: ./{PLUGIN_LIBRARY}).",
        "set -euo pipefail",
        'cd "$(dirname "$0")"',
        f'TRTSPEC_PLUGIN_LIB="${{TRTSPEC_PLUGIN_LIB:-./{PLUGIN_LIBRARY}}}"',
        'if [ ! -f "$TRTSPEC_PLUGIN_LIB" ]; then echo "plugin library $TRTSPEC_PLUGIN_LIB not found" >&2; exit 1; fi',
        *commands, ""])


def _build_engines_with_tensorrt(out: Path, spec: ExportSpec, profile: Profile, plugin_lib: Path, fp16: bool):
    """Build both plans with the TensorRT Python API (thin: parse, one profile, serialize)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    trt.get_plugin_registry().load_library(str(plugin_lib))
    for name, shapes in (("target_verify.onnx", profile.target_shapes(spec)), ("draft_step.onnx", profile.draft_shapes(spec))):
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


def write_tensorrt_backend(target_dir, draft_dir, out_dir, *, max_nodes: int, max_depth: int | None = None,
                           quant: str = "none", max_batch: int = 64, max_seq_len: int = 2048, fp16: bool = True,
                           log=print) -> dict:
    """Export the step graphs into ``out_dir`` and build engines or write ``build_engines.sh``.

    ``quant`` (:data:`trtspec.onnx.export.QUANT_FORMATS`) puts Model-Optimizer Q/DQ nodes in the
    graphs; TensorRT then builds strongly typed engines (``--stronglyTyped``) instead of ``--fp16``.
    Returns the runtime config written to ``out_dir/runtime_config.json``.
    """
    profile = Profile(max_batch, max_seq_len)
    fp16 = fp16 and quant == "none"
    out_dir = Path(out_dir)
    spec = export_step_graphs(target_dir, draft_dir, out_dir, max_nodes=max_nodes, max_depth=max_depth, quant=quant)
    plugin = _find_plugin_library()
    engines = False
    if tensorrt_available() and plugin is not None:
        _build_engines_with_tensorrt(out_dir, spec, profile, plugin, fp16)
        engines = True
        log(f"built TensorRT engines target_verify.plan and draft_step.plan with {plugin}")
    else:
        why = "the tensorrt package is not importable" if not tensorrt_available() else f"{PLUGIN_LIBRARY} was not found"
        cmds = [trtexec_command("target_verify.onnx", profile.target_shapes(spec), "$TRTSPEC_PLUGIN_LIB", fp16),
                trtexec_command("draft_step.onnx", profile.draft_shapes(spec), "$TRTSPEC_PLUGIN_LIB", fp16)]
        script = out_dir / "build_engines.sh"
        script.write_text(_script(cmds))
        script.chmod(0o755)
        log(f"engines not built: {why}; TensorRT engines need TensorRT and a GPU. "
            f"Run {script} on a machine that has them.")
    config = {"format": "trtspec.tensorrt_runtime/v1", "engines_built": engines,
              "plugin_library": PLUGIN_LIBRARY, "plugin_namespace": "trtspec", "max_nodes": spec.max_nodes,
              "max_depth": spec.max_depth, "fp16": fp16, "quant": quant,
              "graphs": {"target_verify": {"onnx": "target_verify.onnx", "plan": "target_verify.plan",
                                           "profile": {k: [list(s) for s in v] for k, v in profile.target_shapes(spec).items()}},
                         "draft_step": {"onnx": "draft_step.onnx", "plan": "draft_step.plan",
                                        "profile": {k: [list(s) for s in v] for k, v in profile.draft_shapes(spec).items()}}}}
    (out_dir / "runtime_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return config
