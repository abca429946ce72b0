"""Lay out (or check) the TensorRT-LLM Python sources the `engines` tier runs, as listed in trtllm-sources.yaml.

    python tools/engines/trtllm_sources.py --version main-0004396 --from DIR   # copy DIR/<path> after checking each
    python tools/engines/trtllm_sources.py --version main-0004396              # check what is laid out already

Files land under ``$TRTSPEC_ENGINES_DIR`` (default ``~/.cache/trtspec/engines``) ``/trtllm-VERSION/src``; each is
checked against its length (characters) and sha256 first, and a file that does not match is refused with both
figures. A missing file is named with where to read it (repository, commit, path). Exit 0 when every file is in
place, 1 otherwise. Nothing here downloads anything: the files come from the public repository by hand (see the
header of trtllm-sources.yaml); they are never committed to this repository.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "trtllm-sources.yaml"


def engines_dir() -> Path:
    return Path(os.environ.get("TRTSPEC_ENGINES_DIR", Path.home() / ".cache" / "trtspec" / "engines"))


def manifest(version: str) -> list[dict]:
    import yaml

    doc = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    if version not in doc:
        raise SystemExit(f"trtllm_sources: --version {version!r} has no sources listed in {MANIFEST.name}; "
                         f"known: {', '.join(doc)}")
    return doc[version]


def problem(text: str | None, entry: dict) -> str | None:
    """Why ``text`` is not the listed file (None when it is)."""
    if text is None:
        return (f"missing: read {entry['repo']} {entry['file']} at {entry['commit']}"
                + (f" ({entry['excerpt']})" if entry.get("excerpt") else "") + f", {entry['chars']} characters")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if len(text) != entry["chars"] or digest != entry["sha256"]:
        return (f"differs from {entry['file']}@{entry['commit'][:7]}: {len(text)} characters, sha256 {digest[:16]}; "
                f"expected {entry['chars']}, {entry['sha256'][:16]}")
    return None


def read(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.is_file() else None


def place(entry: dict, text: str, dest: Path) -> None:
    """Write atomically (temp file + rename), so a half-written source never looks laid out."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default="main-0004396", help="TensorRT-LLM version (default: main-0004396, the one "
                    "whose llm_args.py is stored whole)")
    ap.add_argument("--from", dest="src", type=Path, help="directory holding the saved files under their paths")
    a = ap.parse_args()
    root = engines_dir() / f"trtllm-{a.version}" / "src"
    bad = 0
    for entry in manifest(a.version):
        dest = root / entry["path"]
        text = read(a.src / entry["path"]) if a.src else read(dest)
        why = problem(text, entry)
        if why is None and a.src:
            place(entry, text, dest)
        print(f"trtllm_sources: {entry['path']}: {why or 'ok'}", file=sys.stderr if why else sys.stdout)
        bad += why is not None
    if bad:
        print(f"trtllm_sources: {bad} file(s) not in place under {root}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
