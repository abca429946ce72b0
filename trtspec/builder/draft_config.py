"""Where a block drafter's settings live in its ``config.json``, read the way the serving engines read them.

DSpark and DFlash drafts state ``target_layer_ids``, the block size, the mask token and (DSpark) the Markov rank
under several spellings: top-level ``dspark_*`` keys (DeepSeek), a nested ``dflash_config`` (SpecForge / RadixArk
drafters), a nested ``dspark_config``, or plain top-level keys. TensorRT-LLM reads them in a fixed order that
changed between versions (engine fact ``dspark_reads``): main-0004396 reads ``dflash_config`` before the
``dspark_*`` keys, the PR #16888 branch reads only ``dspark_config`` and ``dspark_*``. A checkpoint that states one
setting twice with different values is contradictory whatever the order -- which layers the draft was trained on is
ambiguous -- so it is refused, naming both spellings. Otherwise every present spelling agrees and
:meth:`BlockDraftConfig.read_by` says which one an engine version would find (``None``: it finds none, and the
emitter must write the value itself).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

#: settings of a DSpark draft and of a DFlash draft that trtspec reads.
BLOCK_SETTINGS = {"dspark": ("target_layer_ids", "block_size", "mask_token_id", "markov_rank"),
                  "dflash": ("target_layer_ids", "block_size", "mask_token_id")}
#: spellings trtspec accepted for a DFlash draft before engine facts existed (TensorRT-LLM reads only dflash_config).
_DFLASH_EXTRA = {"target_layer_ids": ("dflash_target_layer_ids", "target_layer_ids"),
                 "block_size": ("block_size",), "mask_token_id": ("mask_token_id",)}


class DraftConfigError(ValueError):
    """The draft's ``config.json`` contradicts itself or lacks a setting the drafter needs."""


@dataclass(frozen=True)
class Setting:
    """One setting and every spelling of it present in ``config.json`` (they all agree)."""

    name: str
    value: Any
    spellings: tuple[str, ...]


@dataclass(frozen=True)
class BlockDraftConfig:
    """The settings of a DSpark / DFlash draft, each with the spellings it was found under."""

    drafter: str
    settings: Mapping[str, Setting] = field(default_factory=dict)

    def value(self, name: str) -> Any:
        s = self.settings.get(name)
        return None if s is None else s.value

    @property
    def block_size(self) -> Optional[int]:
        return self.value("block_size")

    @property
    def target_layer_ids(self) -> Optional[list[int]]:
        v = self.value("target_layer_ids")
        return None if v is None else list(v)

    def read_by(self, name: str, order: list[str]) -> Optional[str]:
        """The first spelling of ``order`` present here, i.e. where an engine reading in that order finds
        ``name``; None when it finds none of them."""
        s = self.settings.get(name)
        if s is None:
            return None
        return next((sp for sp in order if sp in s.spellings), None)


@dataclass(frozen=True)
class DrafterFacts:
    """What the emitters need to know about the draft (or MTP target) beyond the recipe."""

    layer_ids: Optional[list[int]] = None  # EAGLE-3 capture layers / DFlash, DSpark target_layer_ids
    block: Optional[BlockDraftConfig] = None  # DSpark / DFlash settings with their spellings
    mtp_layers: Optional[int] = None  # the MTP target's num_nextn_predict_layers
    draft_architectures: tuple[str, ...] = ()  # the draft's config.json architectures
    draft_model_type: Optional[str] = None  # the draft's config.json model_type
    target_model_type: Optional[str] = None  # the target's config.json model_type

    def serves_block_draft(self, drafter: str, archs: Optional[dict]) -> Optional[str]:
        """None when an engine whose fact ``draft_architectures`` is ``archs`` loads this DFlash / DSpark draft,
        else why not (unknown architectures: the draft's own are not stated -- assume the engine loads it)."""
        if not archs or drafter not in archs or not self.draft_architectures:
            return None
        have = set(self.draft_architectures)
        if have & set(archs[drafter]):
            return None
        if drafter == "dspark" and archs.get("dspark_qwen3") in have and self.draft_model_type == "qwen3":
            return None
        if drafter == "dspark" and self.target_model_type in archs.get("dspark_deepseek_targets", []):
            return None
        return (f"its {drafter} drafts are {sorted(archs[drafter])}; this draft is {sorted(have)} (model_type "
                f"{self.draft_model_type})")


def lookup(config: dict, spelling: str) -> Any:
    """``config["a"]["b"]`` for ``"a.b"``, ``config["x"]`` for ``"x"``; None when absent."""
    node: Any = config
    for part in spelling.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def spellings(drafter: str) -> dict[str, tuple[str, ...]]:
    """Every spelling of each setting of ``drafter``: the union of what the encoded TensorRT-LLM versions read
    (default version's order first), plus the plain keys trtspec always accepted for DFlash."""
    from trtspec.builder.engine_facts import DEFAULT_VERSION, VERSIONS, engine_version

    versions = [DEFAULT_VERSION["trtllm"]] + [v for v in VERSIONS["trtllm"] if v != DEFAULT_VERSION["trtllm"]]
    out: dict[str, tuple[str, ...]] = {}
    for name in BLOCK_SETTINGS[drafter]:
        seen: list[str] = []
        for v in versions:
            reads = engine_version("trtllm", v)[f"{drafter}_reads"]
            seen += [s for s in reads.get(name, ()) if s not in seen]
        if drafter == "dflash":
            seen = [f"dflash_config.{name}"] + [s for s in seen if s != f"dflash_config.{name}"]
            seen += [s for s in _DFLASH_EXTRA.get(name, ()) if s not in seen]
        out[name] = tuple(seen)
    return out


def read_block_draft(config: dict, drafter: str, reader=None) -> BlockDraftConfig:
    """Every setting of a ``drafter`` ("dspark" | "dflash") draft with the spellings present; raises
    :class:`DraftConfigError` when two spellings of one setting disagree. ``reader`` (an engine-facts
    ``EngineVersion`` of TensorRT-LLM) names, in that message, the spelling the targeted version reads first."""
    settings = {}
    for name, options in spellings(drafter).items():
        found = [(sp, lookup(config, sp)) for sp in options if lookup(config, sp) is not None]
        if not found:
            continue
        first_sp, first_v = found[0]
        for sp, v in found[1:]:
            if v != first_v:
                raise DraftConfigError(
                    f"config.json states {name} twice with different values: {first_sp} = {first_v!r} but "
                    f"{sp} = {v!r}{_who_reads(reader, drafter, name, found)}; the draft was trained for one of them "
                    "only: make both spellings agree (or remove one)")
        settings[name] = Setting(name=name, value=first_v, spellings=tuple(sp for sp, _ in found))
    return BlockDraftConfig(drafter=drafter, settings=settings)


def _who_reads(reader, drafter: str, name: str, found: list) -> str:
    if reader is None:
        return ""
    order = reader[f"{drafter}_reads"].get(name, [])
    present = {sp for sp, _ in found}
    first = next((sp for sp in order if sp in present), None)
    if first is None:
        return f" ({reader.label} reads neither)"
    return f" ({reader.label} reads {first} first)"
