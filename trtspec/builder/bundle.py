"""Bundle mechanics: atomic output directory, quantized-checkpoint cache, manifest.

* :class:`AtomicDir` builds into ``<out parent>/.<out name>.tmp-<pid>-<random>`` and renames it onto
  ``--out`` only when the build completes (an existing bundle is swapped out and removed after the
  rename); on any exception, Ctrl-C included, the temporary directory is removed and ``--out`` is
  left as it was.
* :class:`QuantCache` keeps exported checkpoints under ``<cache dir>/<key>/`` where the key hashes
  the input checkpoint's files, the quantization config, the calibration data and the tool
  versions; entries are written to a temporary sibling and renamed, so a killed build never leaves
  a half entry, and a rerun after a failure reuses what was finished.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Iterable, Optional

from trtspec.builder.interrupt import deferred

MANIFEST_FORMAT = "trtspec.bundle/v1"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex sha256 of one file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def hash_files(root: Path, files: Optional[Iterable[Path]] = None) -> dict[str, str]:
    """``{relative path: sha256}`` of ``files`` (default: every regular file under ``root``), sorted."""
    root = Path(root)
    files = sorted(files) if files is not None else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): sha256_file(p) for p in files}


def _canon(obj):
    if isinstance(obj, dict):
        return {repr(k) if not isinstance(k, str) else k: _canon(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canon(v) for v in obj]
    return obj


def digest(obj) -> str:
    """sha256 of the canonical JSON of ``obj`` (non-string dict keys written with ``repr``)."""
    return hashlib.sha256(json.dumps(_canon(obj), sort_keys=True, default=str).encode()).hexdigest()


def tool_versions() -> dict[str, str]:
    """Versions of trtspec, Python, torch, Model-Optimizer and transformers (``absent`` if not installed)."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name, dist in (("trtspec", "trtspec"), ("torch", "torch"), ("modelopt", "nvidia-modelopt"),
                       ("transformers", "transformers"), ("safetensors", "safetensors")):
        try:
            out[name] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    if out["trtspec"] == "absent":
        from trtspec import __version__

        out["trtspec"] = __version__
    return out


class AtomicDir:
    """Context manager yielding a temporary directory that becomes ``out`` on success.

    >>> with AtomicDir(Path("bundle")) as tmp:   # doctest: +SKIP
    ...     (tmp / "x").write_text("done")       # bundle/ appears only here, complete
    """

    def __init__(self, out: Path):
        self.out = Path(out).expanduser().absolute()
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
        self.committed = False

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir()
        return self.tmp

    def commit(self) -> None:
        """Rename the temporary directory onto ``out`` (swapping out an existing bundle)."""
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.old-{os.getpid()}-{secrets.token_hex(3)}"
            os.rename(self.out, old)
        try:
            os.rename(self.tmp, self.out)
        except BaseException:
            if old is not None:
                os.rename(old, self.out)
            raise
        self.committed = True
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None and not self.committed:
            self.commit()
        if not self.committed:
            with deferred():  # a second Ctrl-C waits until the temporary directory is gone
                shutil.rmtree(self.tmp, ignore_errors=True)
        return False


class QuantCache:
    """Exported checkpoints keyed by a hash of everything that determines them."""

    def __init__(self, root: Path):
        self.root = Path(root).expanduser()

    @staticmethod
    def key(input_hashes: dict[str, str], quant: str, kv_cache_quant: str, calib: str, config: dict,
            versions: dict[str, str]) -> str:
        """Cache key: input file hashes, format names, the Model-Optimizer config, calibration data
        fingerprint, and the torch / Model-Optimizer / transformers versions."""
        return digest({"inputs": input_hashes, "quant": quant, "kv": kv_cache_quant, "calib": calib,
                       "config": config, "versions": {k: versions.get(k) for k in ("torch", "modelopt",
                                                                                     "transformers")}})[:32]

    def lookup(self, key: str) -> Optional[Path]:
        """The cached checkpoint directory for ``key``, or None."""
        d = self.root / key
        return d if (d / ".complete").is_file() else None

    def store(self, key: str, src: Path) -> Path:
        """Copy ``src`` into the cache atomically; return the entry directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / key
        tmp = self.root / f".{key}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
        try:
            shutil.copytree(src, tmp)
            (tmp / ".complete").write_text(json.dumps(hash_files(tmp)))
            if final.exists():  # a concurrent build finished the same entry first
                shutil.rmtree(tmp)
            else:
                os.rename(tmp, final)
        finally:
            if tmp.exists():
                with deferred():
                    shutil.rmtree(tmp, ignore_errors=True)
        return final

    def materialize(self, key: str, dst: Path) -> Path:
        """Copy the entry for ``key`` to ``dst`` (without the marker); raise if it changed since stored."""
        src = self.lookup(key)
        if src is None:
            raise KeyError(key)
        recorded = json.loads((src / ".complete").read_text())
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".complete"))
        now = hash_files(dst)
        if now != {k: v for k, v in recorded.items() if k != ".complete"}:
            shutil.rmtree(dst)
            shutil.rmtree(src, ignore_errors=True)
            raise RuntimeError(f"cache entry {src} was modified after it was stored; removed it, rerun the build")
        return dst


def write_manifest(bundle: Path, manifest: dict) -> dict:
    """Add ``outputs`` (sha256 of every file in ``bundle``) and write ``manifest.json``; return it."""
    manifest = dict(manifest)
    manifest["format"] = MANIFEST_FORMAT
    manifest["outputs"] = {k: v for k, v in hash_files(bundle).items() if k != "manifest.json"}
    (Path(bundle) / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest
