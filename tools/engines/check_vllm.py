"""Feed a bundle's ``vllm.yaml`` through vLLM's own code, the way ``vllm serve ./target --config vllm.yaml`` does.

Run inside a vLLM environment made by ``tools/engines/setup.sh`` (this file imports nothing from trtspec):

    PYTHONSAFEPATH=1 python check_vllm.py --gpu h200 --out results.json BUNDLE [BUNDLE ...]

Steps, all vLLM's own code: the ``serve`` sub-command's argument parser (``FlexibleArgumentParser`` reading
``--config vllm.yaml``), ``ServeSubcommand.validate``, ``AsyncEngineArgs.from_cli_args`` and
``create_engine_config`` (``SpeculativeConfig`` validation, the model-runner choice, the V1 runner's drop of
unsupported per-batch schedules), then the scheduler's expansion of ``num_speculative_tokens_per_batch_size`` into
the draft length of every batch size (``build_dynamic_sd_schedule_lookup`` called as ``Scheduler.__init__`` calls
it). It prints the resolved settings as one JSON object on stdout; the engine's warnings go to stderr.

Only what a CPU host cannot answer is replaced, and each replacement is printed on stderr as ``stub: ...``:
vLLM's compiled CUDA extensions (they need ``libcuda.so.1``) where their import fails, and the platform's device
queries (device name, capability, memory, count) answered for the GPU named by ``--gpu``; ``HAS_TRITON`` is
answered as on a GPU host (its torch ships Triton), which decides vLLM's model-runner choice.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path

STUBS_DIR = Path(__file__).resolve().parent / "stubs"
STUBS: list[str] = []


def stub(what: str) -> None:
    STUBS.append(what)
    print(f"stub: {what}", file=sys.stderr, flush=True)


def install_stubs(gpu: str, count: int) -> None:
    """The device answers here and, through ``sitecustomize``, in every subprocess vLLM starts."""
    sys.path.insert(0, str(STUBS_DIR))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STUBS_DIR), os.environ.get("PYTHONPATH")]))
    os.environ["TRTSPEC_ENGINE_STUBS"] = f"vllm:{gpu}:{count}"
    import engine_stubs

    engine_stubs.vllm(gpu, count, stub)


def parse(argv: list[str]):
    """``vllm serve ./target --config vllm.yaml`` up to the engine config."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    cmd = ServeSubcommand()
    cmd.subparser_init(parser.add_subparsers(required=False, dest="subparser"))
    args = parser.parse_args(argv)
    cmd.validate(args)
    if getattr(args, "model_tag", None) is not None:  # as ServeSubcommand.cmd does
        args.model = args.model_tag
    engine_args = AsyncEngineArgs.from_cli_args(args)
    return engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)


def per_batch(cfg) -> list[int] | None:
    """The draft length of every batch size 1..max_num_seqs, expanded as ``Scheduler.__init__`` expands it."""
    spec = cfg.speculative_config
    if spec is None or not spec.num_speculative_tokens_per_batch_size:
        return None
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    dense = build_dynamic_sd_schedule_lookup(spec.num_speculative_tokens_per_batch_size,
                                             vllm_max_batch_size=cfg.scheduler_config.max_num_seqs,
                                             vllm_num_speculative_tokens=spec.num_speculative_tokens)
    return dense[1:]


def resolved(cfg) -> dict:
    spec = cfg.speculative_config
    par = cfg.parallel_config
    out = {
        "model": cfg.model_config.model, "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "max_model_len": cfg.model_config.max_model_len, "kv_cache_dtype": cfg.cache_config.cache_dtype,
        "tensor_parallel_size": par.tensor_parallel_size, "data_parallel_size": par.data_parallel_size,
        "enable_expert_parallel": bool(par.enable_expert_parallel),
        "use_v2_model_runner": bool(cfg.use_v2_model_runner), "speculative_config": None,
    }
    if spec is not None:
        ranges = spec.num_speculative_tokens_per_batch_size
        out["speculative_config"] = {
            "method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
            "model": spec.draft_model_config.model if spec.draft_model_config is not None else None,
            "prompt_lookup_max": spec.prompt_lookup_max, "prompt_lookup_min": spec.prompt_lookup_min,
            "num_speculative_tokens_per_batch_size": [list(r) for r in ranges] if ranges else None,
            "rejection_sample_method": spec.rejection_sample_method,
            "enable_adaptive_verification": bool(spec.enable_adaptive_verification),
            "draft_model_type": (getattr(spec.draft_model_config.hf_config, "model_type", None)
                                 if spec.draft_model_config is not None else None),
            "draft_architectures": (list(spec.draft_model_config.architectures or [])
                                    if spec.draft_model_config is not None else None),
        }
        out["draft_len_per_batch"] = per_batch(cfg)
    return out


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def check_one(config: str) -> dict:
    """Check the config in the current directory (a bundle); the result without the stubs."""
    import yaml

    with open(config) as f:
        doc = yaml.safe_load(f)
    collect = _Collect()
    logging.getLogger("vllm").addHandler(collect)
    try:
        cfg = parse(["serve", doc.get("model", "./target"), "--config", config])
        return {"accepted": True, "resolved": resolved(cfg), "warnings": collect.lines}
    except (Exception, SystemExit) as e:  # the engine refused the config: report its own message
        return {"accepted": False, "error": f"{type(e).__name__}: {e}", "warnings": collect.lines}
    finally:
        logging.getLogger("vllm").removeHandler(collect)


def preload() -> None:
    """Import what ``parse`` uses once, before the per-bundle processes fork."""
    import vllm.engine.arg_utils  # noqa: F401
    import vllm.entrypoints.cli.serve  # noqa: F401


def devices(bundles: list[str], config: str) -> int:
    import yaml

    most = 1
    for b in bundles:
        doc = yaml.safe_load((Path(b) / config).read_text())
        most = max(most, int(doc.get("tensor_parallel_size", 1)) * int(doc.get("data_parallel_size", 1) or 1))
    return most


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="*", default=["."], help="bundle directories (default: the current one)")
    ap.add_argument("--gpu", default="h200", help="GPU the device queries answer for (tools/engines/stubs)")
    ap.add_argument("--config", default="vllm.yaml", help="the config file inside each bundle")
    ap.add_argument("--out", default="-", help="JSON list of results, one per bundle (default: stdout; vLLM logs to "
                    "stdout too, so tests pass a file)")
    a = ap.parse_args()
    if os.environ.get("PYTHONSAFEPATH") != "1":
        print("check_vllm: run with PYTHONSAFEPATH=1 (a bundle's triton/ folder would shadow the triton package)",
              file=sys.stderr)
        return 2
    bundles = [str(Path(b).resolve()) for b in a.bundles]
    install_stubs(a.gpu, devices(bundles, a.config))
    preload()
    head = {"engine": "vllm", "version": importlib.metadata.version("vllm"), "stubs": STUBS}
    results = [{**head, "bundle": b, **forked(b, lambda: check_one(a.config))} for b in bundles]
    return write(results, a.out)


def forked(bundle: str, fn) -> dict:
    """Run ``fn`` in a child process forked from this warm one, inside ``bundle``: each bundle gets a fresh engine
    state (no cache of another bundle's relative paths) without importing the engine again."""
    read, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            os.chdir(bundle)
            data = json.dumps(fn(), default=str).encode()
        except BaseException as e:  # noqa: BLE001 - reported to the parent, never swallowed
            data = json.dumps({"accepted": False, "error": f"checker: {type(e).__name__}: {e}"}).encode()
        with os.fdopen(write_end, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"accepted": False, "error": f"checker: the process for {bundle} died (status {status})"}
    return json.loads(data)


def write(results: list, out: str) -> int:
    text = json.dumps(results, default=str, indent=1)
    if out == "-":
        print(text)
    else:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 0 if all(r["accepted"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
