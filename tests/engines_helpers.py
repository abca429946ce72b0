"""Check a bundle with the serving engines' own config code: ``check_bundle(bundle_dir, engine, version)``.

The engines live in their own environments (``bash tools/engines/setup.sh``, cached under
``$TRTSPEC_ENGINES_DIR`` or ``~/.cache/trtspec/engines``); ``tools/engines/check_<engine>.py`` runs inside one, in
the bundle directory, and reports what the engine resolved from the bundle's config. Every stub it needed (device
probes, native extensions) is printed here as ``stub: ...`` so the test log names it. Where an engine environment
is missing the calling test is skipped with the command that installs it.

``unchanged_vllm`` / ``unchanged_sglang`` / ``unchanged_trtllm`` list every field trtspec wrote whose resolved value
differs (empty: the engine kept them all).

TensorRT-LLM (``engine="trtllm"``) does not install here: its environment runs the version's own ``llm_args.py``
laid out under ``trtllm-<version>/src`` (``tools/engines/trtllm-sources.yaml``); the version checked by default is
``TRTLLM_CHECKED``, the one whose sources are listed.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from trtspec.builder.engine_facts import DEFAULT_VERSION

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools" / "engines"
ENGINES_DIR = Path(os.environ.get("TRTSPEC_ENGINES_DIR", Path.home() / ".cache" / "trtspec" / "engines"))
#: the engine releases tools/engines/setup.sh installs.
INSTALLED = {"vllm": "0.33.0", "sglang": "0.5.23"}
#: the TensorRT-LLM version whose Python sources the tier runs (its llm_args.py is stored whole at that commit).
TRTLLM_CHECKED = "main-0004396"
#: set-typed TensorRT-LLM fields (the engine keeps them as a set: compared without order).
TRTLLM_SET_FIELDS = {"eagle3_layers_to_capture"}


def engine_python(engine: str, version: str) -> Path | None:
    """The Python of the ``engine`` ``version`` environment, or None where it is not set up."""
    env = ENGINES_DIR / f"{engine}-{version}"
    return env / "bin" / "python" if (env / ".ready").is_file() else None


def check_bundles(bundle_dirs: list[Path], engine: str, version: str | None = None, gpu: str = "h200",
                  timeout: int = 1800) -> list[dict]:
    """Run ``engine``'s own parser and validators on each bundle's config (one engine process, a forked child per
    bundle); return the checker's report per bundle (``accepted``, ``resolved`` or ``error``, ``warnings``,
    ``stubs``)."""
    version = version or (TRTLLM_CHECKED if engine == "trtllm" else DEFAULT_VERSION[engine])
    py = engine_python(engine, version)
    if py is None:
        hint = ("lay out its sources (tools/engines/trtllm-sources.yaml, tools/engines/trtllm_sources.py), then "
                if engine == "trtllm" else "")
        pytest.skip(f"{engine} {version} is not set up: {hint}bash tools/engines/setup.sh {engine}")
    extra = ["--src", str(ENGINES_DIR / f"trtllm-{version}" / "src")] if engine == "trtllm" else []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PYTHONSAFEPATH="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
        proc = subprocess.run([str(py), str(TOOLS / f"check_{engine}.py"), "--gpu", gpu, "--out", str(out), *extra,
                               *[str(Path(b).resolve()) for b in bundle_dirs]],
                              cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        if not out.is_file():
            raise AssertionError(f"check_{engine}.py wrote no result (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
        results = json.loads(out.read_text())
    for s in results[0]["stubs"] if results else []:
        print(f"stub: {engine} {version}: {s}")
    return results


def check_bundle(bundle_dir: Path, engine: str, version: str | None = None, gpu: str = "h200") -> dict:
    """:func:`check_bundles` for one bundle."""
    return check_bundles([bundle_dir], engine, version, gpu)[0]


def _same(written, resolved) -> bool:
    if isinstance(written, (list, tuple)) and isinstance(resolved, (list, tuple)):
        return len(written) == len(resolved) and all(_same(a, b) for a, b in zip(written, resolved))
    return str(written) == str(resolved)


def unchanged_vllm(bundle_dir: Path, result: dict) -> list[str]:
    """Fields of ``vllm.yaml`` whose value vLLM resolved differently: ``["key: wrote X, engine Y", ...]``."""
    data = yaml.safe_load((bundle_dir / "vllm.yaml").read_text())
    res = result["resolved"]
    diffs = [f"{k}: wrote {v!r}, engine {res.get(k)!r}" for k, v in data.items()
             if k != "speculative_config" and not _same(v, res.get(k))]
    spec, rspec = data.get("speculative_config") or {}, res.get("speculative_config") or {}
    diffs += [f"speculative_config.{k}: wrote {v!r}, engine {rspec.get(k)!r}" for k, v in spec.items()
              if not _same(v, rspec.get(k))]
    return diffs


def unchanged_sglang(bundle_dir: Path, result: dict, aliases: dict | None = None) -> list[str]:
    """Options of ``sglang.args`` whose value SGLang resolved differently (a bare flag is True; ``aliases`` maps
    an algorithm name to the one SGLang resolves it to, e.g. NEXTN -> EAGLE)."""
    words = shlex.split((bundle_dir / "sglang.args").read_text())
    written, i = {}, 0
    while i < len(words):
        name = words[i][2:].replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            written[name], i = words[i + 1], i + 2
        else:
            written[name], i = True, i + 1
    res = result["resolved"]
    if aliases and written.get("speculative_algorithm") in aliases:
        written["speculative_algorithm"] = aliases[written["speculative_algorithm"]]
    return [f"--{k.replace('_', '-')}: wrote {v!r}, engine {res.get(k)!r}" for k, v in written.items()
            if not _same(v, res.get(k))]


def _trtllm_equal(key, written, resolved) -> bool:
    if key == "draft_len_schedule" and isinstance(written, dict) and isinstance(resolved, dict):
        return {str(k): v for k, v in written.items()} == {str(k): v for k, v in resolved.items()}
    if key in TRTLLM_SET_FIELDS and isinstance(resolved, (list, tuple)):
        return sorted(written) == sorted(resolved)
    return _same(written, resolved)


def _trtllm_diff(prefix: str, written: dict, resolved: dict) -> list[str]:
    out = []
    for k, v in written.items():
        r = resolved.get(str(k)) if isinstance(resolved, dict) else None
        if isinstance(v, dict) and isinstance(r, dict) and k != "draft_len_schedule":
            out += _trtllm_diff(f"{prefix}{k}.", v, r)
        elif not _trtllm_equal(k, v, r):
            out.append(f"{prefix}{k}: wrote {v!r}, engine {r!r}")
    return out


def unchanged_trtllm(bundle_dir: Path, result: dict, config: str = "llm_api.yaml") -> list[str]:
    """Fields of ``llm_api.yaml`` (nested ones as ``block.field``) whose value TensorRT-LLM resolved differently."""
    data = yaml.safe_load((Path(bundle_dir) / config).read_text())
    return _trtllm_diff("", data, result["resolved"])


if __name__ == "__main__":  # python tests/engines_helpers.py BUNDLE ENGINE [VERSION]
    r = check_bundle(Path(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    print(json.dumps({k: v for k, v in r.items() if k != "stderr_tail"}, indent=1))
