"""Feed a bundle's ``sglang.args`` through SGLang's own code, the way ``python -m sglang.launch_server`` does.

Run inside an SGLang environment made by ``tools/engines/setup.sh`` (this file imports nothing from trtspec):

    PYTHONSAFEPATH=1 python check_sglang.py --gpu h200 --out results.json BUNDLE [BUNDLE ...]

Steps, all SGLang's own code: ``prepare_server_args`` (its argparse over the words of ``sglang.args``),
``ServerArgs.resolve_once()`` (the resolution pipeline: speculative, parallel, memory hooks) and
``check_server_args()``, then the target's and the draft's ``ModelConfig.from_server_args`` (the draft with
``is_draft_model=True``). With ``--speculative-adaptive`` it also builds ``AdaptiveSpeculativeParams`` from the
bundle's adaptive config and reports the steps it starts each batch size at. The resolved speculative settings are
written as JSON to ``--out``; SGLang's warnings go to stderr.

Only what a CPU host cannot answer is replaced (``stubs/engine_stubs.py``), each printed on stderr as ``stub: ...``:
``torch.cuda`` device probes answered for ``--gpu``, and the native ``sgl_kernel`` package as an empty package.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import shlex
import sys
from pathlib import Path

STUBS_DIR = Path(__file__).resolve().parent / "stubs"
STUBS: list[str] = []
#: the resolved fields reported (everything trtspec writes, and what SGLang derives from them).
FIELDS = ("model_path", "tp_size", "ep_size", "max_running_requests", "context_length", "kv_cache_dtype", "device",
          "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
          "speculative_draft_model_path", "speculative_dspark_block_size", "speculative_ngram_max_bfs_breadth",
          "speculative_use_rejection_sampling", "speculative_use_block_verification", "speculative_adaptive",
          "speculative_adaptive_config")


def stub(what: str) -> None:
    STUBS.append(what)
    print(f"stub: {what}", file=sys.stderr, flush=True)


def install_stubs(gpu: str, count: int) -> None:
    """The device answers here and, through ``sitecustomize``, in every subprocess SGLang starts."""
    sys.path.insert(0, str(STUBS_DIR))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STUBS_DIR), os.environ.get("PYTHONPATH")]))
    os.environ["TRTSPEC_ENGINE_STUBS"] = f"sglang:{gpu}:{count}"
    import engine_stubs

    engine_stubs.sglang(gpu, count, stub)


def resolve(argv: list[str]):
    """``python -m sglang.launch_server ARGS`` up to the checked, resolved server arguments."""
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    server_args.resolve_once()
    server_args.check_server_args()
    return server_args


def model_configs(server_args) -> dict:
    """The target's and the draft's ``ModelConfig`` as SGLang builds them at start-up."""
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.configs.model_config import ModelConfig

    cfg = resolving_view(server_args)
    target = ModelConfig.from_server_args(server_args)
    out = {"target_architectures": list(target.hf_config.architectures or []),
           "target_context_len": int(target.context_len)}
    if cfg.speculative_draft_model_path:
        draft = ModelConfig.from_server_args(server_args, model_path=cfg.speculative_draft_model_path,
                                             is_draft_model=True)
        out["draft_architectures"] = list(draft.hf_config.architectures or [])
        out["draft_model_type"] = getattr(draft.hf_config, "model_type", None)
    return out


def adaptive_steps(server_args, max_batch: int) -> list[int] | None:
    """Steps SGLang's adaptive controller starts each batch size 1..max_batch at (None without adaptive)."""
    from sglang.srt.arg_groups.overrides import resolving_view

    cfg = resolving_view(server_args)
    if not cfg.speculative_adaptive:
        return None
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    params = AdaptiveSpeculativeParams(cfg.speculative_num_steps, cfg.speculative_adaptive_config)
    return [params.get_steps_for_batch(b) for b in range(1, max_batch + 1)]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def check_one(args_file: str) -> dict:
    """Check the arguments file in the current directory (a bundle); the result without the stubs."""
    argv = shlex.split(Path(args_file).read_text())
    collect = _Collect()
    logging.getLogger().addHandler(collect)
    try:
        server_args = resolve(argv)
        res = server_args.resolved_dict()
        out = {k: res.get(k) for k in FIELDS}
        out.update(model_configs(server_args))
        out["adaptive_steps_per_batch"] = adaptive_steps(server_args, int(res["max_running_requests"]))
        return {"argv": argv, "accepted": True, "resolved": out, "warnings": collect.lines}
    except (Exception, SystemExit) as e:  # the engine refused the arguments: report its own message
        return {"argv": argv, "accepted": False, "error": f"{type(e).__name__}: {e}", "warnings": collect.lines}
    finally:
        logging.getLogger().removeHandler(collect)


def preload() -> None:
    """Import what ``resolve`` uses once, before the per-bundle processes fork."""
    import sglang.srt.configs.model_config  # noqa: F401
    import sglang.srt.server_args  # noqa: F401


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="*", default=["."], help="bundle directories (default: the current one)")
    ap.add_argument("--gpu", default="h200", help="GPU the device probes answer for (tools/engines/stubs)")
    ap.add_argument("--args", default="sglang.args", help="the arguments file inside each bundle")
    ap.add_argument("--out", default="-", help="JSON list of results, one per bundle (default: stdout)")
    a = ap.parse_args()
    if os.environ.get("PYTHONSAFEPATH") != "1":
        print("check_sglang: run with PYTHONSAFEPATH=1 (a bundle's folders would shadow packages)", file=sys.stderr)
        return 2
    bundles = [str(Path(b).resolve()) for b in a.bundles]
    tp = 1
    for b in bundles:
        argv = shlex.split((Path(b) / a.args).read_text())
        tp = max(tp, int(argv[argv.index("--tp-size") + 1]) if "--tp-size" in argv else 1)
    install_stubs(a.gpu, tp)
    preload()
    head = {"engine": "sglang", "version": importlib.metadata.version("sglang"), "stubs": STUBS}
    results = [{**head, "bundle": b, **forked(b, lambda: check_one(a.args))} for b in bundles]
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
