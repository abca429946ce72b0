"""Facts about the serving engines trtspec writes configs for, one YAML file per engine version.

``trtspec/builder/engines/<engine>-<version>.yaml`` holds what one release or commit of TensorRT-LLM, vLLM or SGLang
does with
the fields trtspec emits (which decoding types honour a per-batch draft length, whether the runtime floors the draft
length, where a DSpark draft's ``target_layer_ids`` are read from, which keys exist, ...). Every fact carries the
``source`` it was read from (``path@commit``, ``path@tag`` or a pull request). A released version names its ``tag``
and the PyPI ``package`` users install (``vllm==0.33.0``); a main-branch read names its ``commit``. The emitters ask
these objects, never a second copy.

The version names are listed here as constants (``--trtllm-version`` and ``--vllm-version`` choices are built from
them without reading any file); ``tests/test_builder_engine_facts.py`` checks they match the YAML files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

ENGINES_DIR = Path(__file__).with_name("engines")

#: engine -> the versions encoded (releases by their number, main-branch reads as ``main-<commit>``).
VERSIONS: dict[str, tuple[str, ...]] = {
    "trtllm": ("pr16888-011d093", "main-0004396", "1.4.0rc4"),
    "vllm": ("main-f19b16d", "main-002e77c", "0.33.0"),
    "sglang": ("main-001067f", "0.5.23"),
}
#: the default version of each engine: the newest release users install where one is encoded.
DEFAULT_VERSION: dict[str, str] = {"trtllm": "1.4.0rc4", "vllm": "0.33.0", "sglang": "0.5.23"}
#: the CLI option that selects each engine's version (named in errors).
VERSION_OPTION = {"trtllm": "--trtllm-version", "vllm": "--vllm-version", "sglang": "--sglang-version"}

#: facts every file of an engine must state (the emitters read them).
REQUIRED: dict[str, tuple[str, ...]] = {
    "trtllm": ("decoding_types", "dynamic_draft_len", "one_engine", "min_runtime_draft_len", "max_concurrency",
               "static_draft_len", "vanilla_mtp_static", "vanilla_mtp_schedule_honoured",
               "linear_total_draft_tokens", "dspark_reads",
               "dspark_block_size_is_max_draft_len", "dflash_reads", "cuda_graph_schedule_keys", "block_verification"),
    "vllm": ("keys", "methods", "methods_with_model", "per_batch_field", "rejection_sample_methods"),
    "sglang": ("keys", "algorithms", "per_batch_field", "block_verification"),
}
#: top-level keys of a facts file (``commit`` for a main-branch read, ``tag`` + ``package`` for a release).
FILE_KEYS = {"engine", "version", "repo", "summary", "facts"}
OPTIONAL_FILE_KEYS = {"commit", "tag", "package"}


class EngineFactsError(ValueError):
    """An engine facts file is malformed, or a version is not encoded."""


@dataclass(frozen=True)
class Fact:
    """One fact: its value, where it was read (``path@commit`` or a pull request), and an optional note."""

    name: str
    value: Any
    source: str
    note: str = ""


@dataclass(frozen=True)
class EngineVersion:
    """The facts of one engine at one commit."""

    engine: str
    version: str
    repo: str
    commit: Optional[str]
    summary: str
    facts: Mapping[str, Fact] = field(repr=False)
    tag: Optional[str] = None
    package: Optional[str] = None

    def __getitem__(self, name: str) -> Any:
        return self.fact(name).value

    def get(self, name: str, default: Any = None) -> Any:
        """The value of fact ``name``, or ``default`` where this version's file does not state it (a fact read
        only for newer versions, e.g. SGLang's n-gram breadth flag)."""
        f = self.facts.get(name)
        return default if f is None else f.value

    def fact(self, name: str) -> Fact:
        try:
            return self.facts[name]
        except KeyError:
            raise EngineFactsError(f"{self.engine} {self.version}: no fact {name!r} "
                                   f"(known: {sorted(self.facts)})") from None

    @property
    def short_commit(self) -> str:
        """``v0.33.0`` for a release, the first 12 hex digits of the commit otherwise."""
        return self.tag or (self.commit or "")[:12]

    @property
    def label(self) -> str:
        """``TensorRT-LLM main-0004396`` style name for messages and READMEs."""
        return f"{ENGINE_NAMES[self.engine]} {self.version}"


ENGINE_NAMES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}


def _fact(path: Path, name: str, raw: Any) -> Fact:
    if not isinstance(raw, dict) or "value" not in raw or not isinstance(raw.get("source"), str) \
            or not raw["source"].strip():
        raise EngineFactsError(f"{path}: fact {name!r} must be a mapping with 'value' and a non-empty 'source'")
    extra = set(raw) - {"value", "source", "note"}
    if extra:
        raise EngineFactsError(f"{path}: fact {name!r} has unknown keys {sorted(extra)}")
    return Fact(name=name, value=raw["value"], source=" ".join(raw["source"].split()),
                note=" ".join(str(raw.get("note", "")).split()))


def load_engine_file(path: Path) -> EngineVersion:
    """Parse and check one facts file (top-level keys, a source on every fact, the engine's required facts)."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise EngineFactsError(f"cannot read engine facts {path}: {e}") from None
    if not isinstance(doc, dict) or not FILE_KEYS <= set(doc) <= FILE_KEYS | OPTIONAL_FILE_KEYS:
        raise EngineFactsError(f"{path}: expected the keys {sorted(FILE_KEYS)} and one of commit / tag "
                               f"(optional: package)")
    engine = doc["engine"]
    if engine not in REQUIRED:
        raise EngineFactsError(f"{path}: unknown engine {engine!r}; expected one of {sorted(REQUIRED)}")
    commit, tag = doc.get("commit"), doc.get("tag")
    if commit is None and tag is None:
        raise EngineFactsError(f"{path}: states neither the commit nor the release tag it was read at")
    if commit is not None:
        commit = str(commit)
        if not 7 <= len(commit) <= 40 or any(c not in "0123456789abcdef" for c in commit):
            raise EngineFactsError(f"{path}: commit must be 7 to 40 lowercase hex digits, got {commit!r}")
    facts = {name: _fact(path, name, raw) for name, raw in (doc["facts"] or {}).items()}
    missing = [n for n in REQUIRED[engine] if n not in facts]
    if missing:
        raise EngineFactsError(f"{path}: {engine} facts lack {missing}")
    return EngineVersion(engine=engine, version=str(doc["version"]), repo=str(doc["repo"]), commit=commit,
                         summary=" ".join(str(doc["summary"]).split()), facts=facts,
                         tag=None if tag is None else str(tag),
                         package=None if doc.get("package") is None else str(doc["package"]))


def check_version(engine: str, version: str) -> str:
    """Return ``version`` when it is encoded for ``engine``, else raise naming the CLI option and the known ones."""
    known = VERSIONS.get(engine)
    if known is None:
        raise EngineFactsError(f"unknown engine {engine!r}; expected one of {sorted(VERSIONS)}")
    if version not in known:
        raise EngineFactsError(f"{VERSION_OPTION[engine]} {version!r} is not a known {ENGINE_NAMES[engine]} version; "
                               f"known: {', '.join(known)}")
    return version


@lru_cache(maxsize=None)
def engine_version(engine: str, version: str | None = None) -> EngineVersion:
    """The facts of ``engine`` at ``version`` (default: ``DEFAULT_VERSION[engine]``), read once."""
    version = check_version(engine, version or DEFAULT_VERSION.get(engine, ""))
    path = ENGINES_DIR / f"{engine}-{version}.yaml"
    ev = load_engine_file(path)
    if (ev.engine, ev.version) != (engine, version):
        raise EngineFactsError(f"{path}: states {ev.engine} {ev.version}, expected {engine} {version}")
    return ev
