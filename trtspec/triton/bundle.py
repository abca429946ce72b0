"""What the Triton model needs from a trtspec bundle.

A bundle (the output of ``trtspec build``) holds ``target/`` (a Hugging Face checkpoint),
usually ``draft/``, ``manifest.json`` (its ``options.drafter``) and ``llm_api.yaml`` (TensorRT-LLM LLM-API options with a
``speculative_config:`` block whose ``speculative_model`` is relative to the bundle). The same
fields choose the trtspec runtime's drafter, draft length and draft-length schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: TensorRT-LLM ``decoding_type`` -> trtspec drafter name.
DECODING_TO_DRAFTER: dict[str, str] = {
    "Draft_Target": "draft_model", "DraftTarget": "draft_model", "Eagle3": "eagle3", "MTP": "mtp",
    "NGram": "ngram", "SA": "sa", "DFlash": "dflash", "DSpark": "dspark",
}
#: Draft length when the bundle states none.
DEFAULT_DRAFT_LEN = 4


class BundleError(ValueError):
    """A directory that is not a servable bundle; the message says what is missing."""


@dataclass(frozen=True)
class BundleLayout:
    """Paths and speculation settings read from a bundle.

    Attributes:
        root: the bundle directory.
        target: target checkpoint directory.
        draft: draft checkpoint directory, or None (drafters without a model, e.g. ngram).
        drafter: trtspec drafter name (``draft_model``, ``eagle3``, ``ngram``, ...).
        draft_len: tokens proposed per step (``max_draft_len``).
        draft_len_schedule: inclusive upper batch bound -> draft length, or None.
        llm_api: the raw ``llm_api.yaml`` mapping ({} when the file is absent).
    """

    root: Path
    target: Path
    draft: Path | None
    drafter: str
    draft_len: int
    draft_len_schedule: dict[int, int] | None = None
    llm_api: dict[str, Any] = field(default_factory=dict)

    @property
    def llm_api_path(self) -> Path:
        return self.root / "llm_api.yaml"


def read_bundle(root: str | Path) -> BundleLayout:
    """Read ``root``; :class:`BundleError` naming the missing piece when it cannot be served."""
    import yaml

    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise BundleError(f"bundle: {root} is not a directory")
    target = root / "target"
    if not (target / "config.json").is_file():
        raise BundleError(f"bundle: {root} has no target/config.json (expected the output of `trtspec build`)")
    llm_api: dict[str, Any] = {}
    if (root / "llm_api.yaml").is_file():
        llm_api = yaml.safe_load((root / "llm_api.yaml").read_text()) or {}
        if not isinstance(llm_api, dict):
            raise BundleError(f"bundle: {root / 'llm_api.yaml'} is not a mapping")
    spec = llm_api.get("speculative_config") or {}
    decoding = spec.get("decoding_type", "Draft_Target")
    if decoding not in DECODING_TO_DRAFTER:
        raise BundleError(f"bundle: speculative_config.decoding_type {decoding!r} is not one of "
                          f"{sorted(DECODING_TO_DRAFTER)}")
    draft: Path | None = None
    if spec.get("speculative_model"):
        draft = Path(spec["speculative_model"])
        draft = draft if draft.is_absolute() else (root / draft).resolve()
    elif (root / "draft" / "config.json").is_file():
        draft = root / "draft"
    drafter = DECODING_TO_DRAFTER[decoding]
    manifest = root / "manifest.json"
    if manifest.is_file():  # written by `trtspec build`: its drafter must agree with llm_api.yaml
        import json

        try:
            built = ((json.loads(manifest.read_text()) or {}).get("options") or {}).get("drafter")
        except json.JSONDecodeError as e:
            raise BundleError(f"bundle: {manifest} is not valid JSON ({e})") from None
        if built and spec and built != drafter:
            raise BundleError(f"bundle: manifest.json says drafter {built!r} but llm_api.yaml's decoding_type "
                              f"{decoding!r} means {drafter!r}")
        drafter = built or drafter
    if drafter in ("draft_model", "eagle3", "dflash", "dspark") and (draft is None or not (draft / "config.json").is_file()):
        raise BundleError(f"bundle: drafter {drafter} needs a draft checkpoint; {draft or root / 'draft'} "
                          "has no config.json")
    schedule = spec.get("draft_len_schedule")
    if schedule is not None:
        schedule = {int(k): int(v) for k, v in dict(schedule).items()}
    draft_len = int(spec.get("max_draft_len", DEFAULT_DRAFT_LEN))
    if draft_len < 1:
        raise BundleError(f"bundle: speculative_config.max_draft_len must be >= 1, got {draft_len}")
    return BundleLayout(root=root, target=target, draft=draft, drafter=drafter, draft_len=draft_len,
                        draft_len_schedule=schedule, llm_api=llm_api)
