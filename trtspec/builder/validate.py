"""Stage 1 of ``trtspec build``: check every input before any heavy work.

Everything here reads only ``config.json``, tokenizer files and safetensors *headers* (plus the
small EAGLE-3 ``d2t`` table), so a bad input fails in well under a second with an error that
names the argument (``--target``, ``--draft``, ``--quant``, ...) and what was expected.
"""
from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from trtspec.builder.draft_config import (BlockDraftConfig, DraftConfigError, DrafterFacts, read_block_draft,
                                          spellings)
from trtspec.builder.engine_facts import engine_version
from trtspec.builder.options import DRAFTERS_WITH_DRAFT, BuildOptions

#: in-feature multiple each format needs (block / group size of its weight quantizer).
QUANT_IN_FEATURE_MULTIPLE = {"int4_awq": 128, "w4a8_awq": 128, "nvfp4": 16, "w4a16_nvfp4": 16}
#: tokenizer files copied into the bundle when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "generation_config.json", "chat_template.jinja")
#: EAGLE-3 head tensors required by Model-Optimizer's speculative export layout (one decoder layer).
EAGLE3_REQUIRED = ("layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                   "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
                   "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
                   "layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight",
                   "layers.0.post_attention_layernorm.weight", "norm.weight", "fc.weight")


class BuildInputError(ValueError):
    """A build input is unusable; the message names the argument and what was expected."""


@dataclass(frozen=True)
class Checkpoint:
    """What validation learned about one checkpoint directory (no weights loaded)."""

    path: Path
    config: dict
    weight_files: tuple[Path, ...]
    tensors: dict  # name -> {"dtype": str, "shape": list[int]} from safetensors headers

    @property
    def hidden_size(self) -> Optional[int]:
        return self.config.get("hidden_size")

    @property
    def num_layers(self) -> Optional[int]:
        return self.config.get("num_hidden_layers")

    @property
    def vocab_size(self) -> Optional[int]:
        return self.config.get("vocab_size")

    @property
    def weight_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.weight_files)


@dataclass
class ValidatedInputs:
    """Result of :func:`validate`: the checked checkpoints and notes for the summary line."""

    target: Checkpoint
    draft: Optional[Checkpoint]
    notes: list[str] = field(default_factory=list)
    draft_layer_ids: Optional[list[int]] = None  # eagle3 capture layers / dflash, dspark target_layer_ids
    max_seq_len: int = 4096  # --max-seq-len, or min(4096, the target's max_position_embeddings)
    block_draft: Optional[BlockDraftConfig] = None  # dflash / dspark settings and where config.json states them
    mtp_layers: Optional[int] = None  # the MTP target's num_nextn_predict_layers

    @property
    def drafter_facts(self) -> DrafterFacts:
        """What the config emitters need to know about the draft beyond the recipe."""
        d = self.draft.config if self.draft is not None else {}
        return DrafterFacts(layer_ids=self.draft_layer_ids, block=self.block_draft, mtp_layers=self.mtp_layers,
                            draft_architectures=tuple(d.get("architectures") or ()),
                            draft_model_type=d.get("model_type"), target_model_type=self.target.config.get("model_type"))

    @property
    def draft_len_cap(self) -> Optional[int]:
        """The largest D the drafter can run, where the draft fixes one: a DFlash block holds the last committed
        token and block_size - 1 drafted ones; a DSpark draft drafts exactly its block (:attr:`fixed_draft_len`)."""
        if self.block_draft is None or self.block_draft.block_size is None:
            return None
        size = int(self.block_draft.block_size)
        return size - 1 if self.block_draft.drafter == "dflash" else size

    @property
    def fixed_draft_len(self) -> Optional[int]:
        """The only D the drafter can run (a DSpark draft drafts exactly its trained block), else None."""
        if self.block_draft is not None and self.block_draft.drafter == "dspark":
            return self.block_draft.block_size
        return None


def read_safetensors_header(path: Path) -> dict:
    """Tensor table of one ``.safetensors`` file: ``{name: {"dtype", "shape", "data_offsets"}}``.

    Raises ``ValueError`` when the header is truncated or its offsets run past the file end.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path} is not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} exceeds the file size {size}")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    end = max((v["data_offsets"][1] for v in header.values()), default=0)
    if 8 + n + end > size:
        raise ValueError(f"{path} is truncated: tensors need {8 + n + end} bytes, file has {size}")
    return header


def load_checkpoint(path: Optional[Path], arg: str, *, needs_architectures: bool = True) -> Checkpoint:
    """Check that ``path`` is a loadable HF checkpoint: a directory with a parseable ``config.json``
    and complete safetensors weights (``arg`` names the CLI option in errors)."""
    if path is None:
        raise BuildInputError(f"{arg} is required")
    path = Path(path).expanduser()
    if not path.is_dir():
        raise BuildInputError(f"{arg} {path}: not a directory (expected a Hugging Face checkpoint directory)")
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise BuildInputError(f"{arg} {path}: config.json is missing (expected a Hugging Face checkpoint)")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise BuildInputError(f"{arg} {path}: config.json is not valid JSON ({e})") from None
    files = sorted(path.glob("*.safetensors"))
    if not files:
        hint = " (PyTorch .bin weights are not supported; convert to safetensors)" if list(path.glob("*.bin")) else ""
        raise BuildInputError(f"{arg} {path}: no *.safetensors weights found{hint}")
    tensors: dict = {}
    for f in files:
        try:
            tensors.update(read_safetensors_header(f))
        except (ValueError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BuildInputError(f"{arg}: weights file {f.name} is unreadable: {e}") from None
    index = path / "model.safetensors.index.json"
    if index.is_file():
        wanted = set(json.loads(index.read_text()).get("weight_map", {}))
        missing = sorted(wanted - set(tensors))
        if missing:
            raise BuildInputError(f"{arg} {path}: {len(missing)} tensors listed in the index are missing, "
                                  f"e.g. {missing[:3]}")
    if needs_architectures and not config.get("architectures"):
        raise BuildInputError(f"{arg} {path}: config.json has no 'architectures' (set it, e.g. "
                              '["LlamaForCausalLM"]; Model-Optimizer export needs it)')
    return Checkpoint(path=path, config=config, weight_files=tuple(files), tensors=tensors)


def tokenizer_vocab(path: Path) -> Optional[dict[str, int]]:
    """Token -> id of ``tokenizer.json`` (model vocab plus added tokens), or None if absent."""
    tj = path / "tokenizer.json"
    if not tj.is_file():
        return None
    data = json.loads(tj.read_text())
    vocab = data.get("model", {}).get("vocab", {})
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        vocab = {piece: i for i, (piece, _score) in enumerate(vocab)}
    vocab = dict(vocab)
    for tok in data.get("added_tokens", []):
        vocab[tok["content"]] = tok["id"]
    return vocab


def _check_tokenizers(target: Checkpoint, draft: Checkpoint) -> None:
    tv, dv = tokenizer_vocab(target.path), tokenizer_vocab(draft.path)
    if tv is not None and dv is not None and tv != dv:
        diff = sorted(set(tv.items()) ^ set(dv.items()))[:3]
        raise BuildInputError(f"--draft {draft.path}: tokenizer vocabulary differs from --target ({len(dv)} vs "
                              f"{len(tv)} tokens; e.g. {diff}); draft_model speculation needs one tokenizer")
    if draft.vocab_size != target.vocab_size:
        raise BuildInputError(f"--draft {draft.path}: vocab_size {draft.vocab_size} differs from --target's "
                              f"{target.vocab_size}; draft_model speculation needs the same vocabulary")


def _layer_ids(ids: Any, target: Checkpoint, what: str) -> list[int]:
    n = target.num_layers
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        raise BuildInputError(f"--draft: {what} must be a non-empty list of layer indices, got {ids!r}")
    bad = [i for i in ids if not (0 <= i < n)]
    if bad:
        raise BuildInputError(f"--draft: {what} {ids} has indices outside the target's {n} layers: {bad}")
    return list(ids)


def _check_eagle3(target: Checkpoint, draft: Checkpoint) -> list[int]:
    if draft.hidden_size != target.hidden_size:
        raise BuildInputError(f"--draft {draft.path}: EAGLE-3 head hidden_size {draft.hidden_size} differs from "
                              f"the target's {target.hidden_size}; the head reads the target's hidden states")
    missing = [k for k in EAGLE3_REQUIRED if k not in draft.tensors]
    if missing:
        raise BuildInputError(f"--draft {draft.path}: not an EAGLE-3 head in Model-Optimizer's export layout; "
                              f"missing tensors {missing[:4]}")
    fc = draft.tensors["fc.weight"]["shape"]
    eagle_cfg = draft.config.get("eagle_config") or {}
    ids = eagle_cfg.get("eagle_aux_hidden_state_layer_ids")
    n_aux = fc[1] // target.hidden_size if target.hidden_size else 0
    if ids is None:
        n = target.num_layers
        ids = [1, n // 2 - 1, n - 4] if n and n >= 6 else None
    if ids is not None:
        ids = _layer_ids(ids, target, "eagle_config.eagle_aux_hidden_state_layer_ids")
        if fc[1] != len(ids) * target.hidden_size:
            raise BuildInputError(f"--draft: EAGLE-3 fc.weight takes {fc[1]} inputs but {len(ids)} captured layers x "
                                  f"hidden {target.hidden_size} = {len(ids) * target.hidden_size}")
    elif n_aux < 1:
        raise BuildInputError(f"--draft: EAGLE-3 fc.weight shape {fc} does not fit the target hidden size")
    draft_vocab = draft.config.get("draft_vocab_size") or draft.vocab_size
    if draft.vocab_size not in (None, target.vocab_size):
        raise BuildInputError(f"--draft: EAGLE-3 head vocab_size {draft.vocab_size} differs from the target's "
                              f"{target.vocab_size}")
    if draft_vocab != target.vocab_size:
        if "d2t" not in draft.tensors:
            raise BuildInputError(f"--draft: EAGLE-3 draft_vocab_size {draft_vocab} != target vocab "
                                  f"{target.vocab_size} and the head has no d2t map to translate draft ids")
        _check_d2t(draft, draft_vocab, target.vocab_size)
    return ids


def _check_d2t(draft: Checkpoint, draft_vocab: int, target_vocab: int) -> None:
    """``d2t[i]`` is the offset of draft id ``i``: target id = ``i + d2t[i]``; every one must be a target id."""
    from safetensors import safe_open

    for f in draft.weight_files:
        with safe_open(str(f), "pt") as st:
            if "d2t" in st.keys():
                d2t = st.get_tensor("d2t").long()
                break
    if d2t.shape != (draft_vocab,):
        raise BuildInputError(f"--draft: EAGLE-3 d2t has shape {tuple(d2t.shape)}, expected ({draft_vocab},)")
    import torch

    tgt = torch.arange(draft_vocab) + d2t
    if int(tgt.min()) < 0 or int(tgt.max()) >= target_vocab or len(torch.unique(tgt)) != draft_vocab:
        raise BuildInputError(f"--draft: EAGLE-3 d2t maps draft ids outside the target vocabulary [0, {target_vocab}) "
                              "or onto the same target id twice")


def _check_mtp(target: Checkpoint) -> int:
    n = target.config.get("num_nextn_predict_layers") or target.config.get("mtp_num_hidden_layers") or 0
    layers = target.num_layers or 0
    has_weights = any(k.startswith(("mtp.", f"model.layers.{layers}.")) for k in target.tensors)
    if n < 1 or not has_weights:
        raise BuildInputError(f"--target {target.path}: no MTP layers (config num_nextn_predict_layers={n}, "
                              f"MTP weights {'present' if has_weights else 'absent'}); --drafter mtp needs a target "
                              "trained with multi-token-prediction layers")
    return int(n)


def _check_model_type(draft: Checkpoint) -> None:
    """vLLM builds every draft's config through transformers' config loader (engine fact ``draft_config_loader``),
    which refuses a config.json without ``model_type``; a bundle vLLM refuses is never written."""
    if not draft.config.get("model_type"):
        arch = (draft.config.get("architectures") or ["?"])[0]
        raise BuildInputError(f"--draft {draft.path}: config.json has no 'model_type' (architectures {arch}); vLLM "
                              "reads every draft through transformers' config loader, which refuses it: set "
                              "model_type to the draft's model family (e.g. \"llama\" for a Llama-layout draft)")


def _check_block_draft(target: Checkpoint, draft: Checkpoint, drafter: str,
                       trtllm_version: Optional[str] = None) -> tuple[list[int], BlockDraftConfig]:
    """Read a DFlash / DSpark draft's settings where TensorRT-LLM reads them; refuse a config.json that states one
    setting twice with different values, and (DSpark) one without target layers or block size."""
    try:
        block = read_block_draft(draft.config, drafter, engine_version("trtllm", trtllm_version))
    except DraftConfigError as e:
        raise BuildInputError(f"--draft {draft.path}: {e}") from None
    ids = block.target_layer_ids
    if ids is None:
        raise BuildInputError(f"--draft {draft.path}: {drafter} draft config has no target_layer_ids "
                              f"({' / '.join(spellings(drafter)['target_layer_ids'])})")
    if drafter == "dspark":
        size = block.block_size
        if size is None:
            raise BuildInputError(f"--draft {draft.path}: dspark draft config states no block size "
                                  f"({' / '.join(spellings(drafter)['block_size'])}); a DSpark draft drafts exactly "
                                  "the block it was trained for, so D cannot be chosen without it")
    size = block.block_size
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < (1 if drafter == "dspark"
                                                                                             else 2)):
        raise BuildInputError(f"--draft {draft.path}: {drafter} block size must be an integer >= "
                              f"{1 if drafter == 'dspark' else 2}, got {size!r}")
    return _layer_ids(ids, target, f"{drafter} target_layer_ids"), block


def linear_in_features(ckpt: Checkpoint) -> dict[str, int]:
    """In-features of every 2-D ``*.weight`` that Model-Optimizer quantizes (embeddings, lm_head and
    norms left out), from the safetensors headers."""
    out = {}
    for name, meta in ckpt.tensors.items():
        if not name.endswith(".weight") or len(meta["shape"]) != 2:
            continue
        if any(s in name for s in ("embed", "lm_head", "norm")):
            continue
        out[name] = meta["shape"][1]
    return out


def check_quant_dims(ckpt: Checkpoint, quant: str, arg: str) -> None:
    """Raise if ``quant`` cannot be applied to ``ckpt``'s linear layers (block sizes)."""
    mult = QUANT_IN_FEATURE_MULTIPLE.get(quant)
    if mult is None:
        return
    bad = {n: f for n, f in linear_in_features(ckpt).items() if f % mult}
    if bad:
        name, f = next(iter(sorted(bad.items())))
        raise BuildInputError(f"{arg} {quant}: needs every linear in-feature to be a multiple of {mult}; "
                              f"{ckpt.path.name} has {len(bad)} layers that are not, e.g. {name} with {f}")


def _is_bundle(path: Path) -> bool:
    m = path / "manifest.json"
    try:
        return json.loads(m.read_text()).get("format") == "trtspec.bundle/v1"
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def check_disk(opts: BuildOptions, need: int) -> None:
    """Raise naming ``--out`` when its filesystem has less than ``need`` bytes free."""
    parent = Path(opts.out).expanduser().resolve().parent
    while not parent.exists():
        parent = parent.parent
    free = shutil.disk_usage(parent).free
    if free < need:
        raise BuildInputError(f"--out {opts.out}: needs about {need / 2**30:.2f} GiB free, the filesystem has "
                              f"{free / 2**30:.2f} GiB")


#: config.json keys that state a MoE target's routed experts (Mixtral / Qwen-MoE / DeepSeek layouts).
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _check_experts(target: Checkpoint, ep: int) -> None:
    """``--ep`` > 1 needs routed experts to spread (vLLM refuses expert parallelism on a dense model: "Number of
    experts in the model must be greater than 0 when expert parallelism is enabled")."""
    n = next((target.config[k] for k in EXPERT_KEYS if target.config.get(k)), None)
    if n is None:
        raise BuildInputError(f"--ep {ep}: the target has no MoE experts (its config.json states none of "
                              f"{', '.join(EXPERT_KEYS)}); expert parallelism needs a MoE target, use --ep 1")
    if int(n) % ep:
        raise BuildInputError(f"--ep {ep}: the target's {n} routed experts do not split evenly over {ep} GPUs")


def validate(opts: BuildOptions) -> ValidatedInputs:
    """Run every check of stage 1; raise :class:`BuildInputError` on the first failure."""
    target = load_checkpoint(opts.target, "--target")
    if opts.ep > 1:
        _check_experts(target, opts.ep)
    if opts.tp > 1 and (target.config.get("num_attention_heads") or 1) % opts.tp:
        raise BuildInputError(f"--tp {opts.tp}: the target's {target.config.get('num_attention_heads')} attention "
                              "heads do not split evenly")
    draft = None
    vi = ValidatedInputs(target=target, draft=None)
    limit = target.config.get("max_position_embeddings")
    if opts.max_seq_len is not None:
        if limit and opts.max_seq_len > limit:
            raise BuildInputError(f"--max-seq-len {opts.max_seq_len} exceeds the target's max_position_embeddings "
                                  f"({limit})")
        vi.max_seq_len = opts.max_seq_len
    elif limit:
        vi.max_seq_len = min(4096, int(limit))
    if opts.drafter in DRAFTERS_WITH_DRAFT:
        if opts.draft is None:
            raise BuildInputError(f"--draft is required for --drafter {opts.drafter}")
        draft = load_checkpoint(opts.draft, "--draft", needs_architectures=opts.drafter == "draft_model")
        _check_model_type(draft)
        vi.draft = draft
    if opts.drafter == "draft_model":
        _check_tokenizers(target, draft)
        check_quant_dims(draft, opts.draft_quant, "--draft-quant")
    elif opts.drafter == "eagle3":
        vi.draft_layer_ids = _check_eagle3(target, draft)
    elif opts.drafter in ("dflash", "dspark"):
        vi.draft_layer_ids, vi.block_draft = _check_block_draft(target, draft, opts.drafter, opts.trtllm_version)
    elif opts.drafter == "mtp":
        vi.mtp_layers = _check_mtp(target)
        if opts.quant != "none" or opts.kv_cache_quant != "none":
            raise BuildInputError(f"--quant {opts.quant} / --kv-cache-quant {opts.kv_cache_quant} with --drafter mtp: "
                                  "quantizing through Hugging Face transformers drops the MTP layers (they are not "
                                  "part of the HF model); use --quant none --kv-cache-quant none with an MTP target "
                                  "that is already quantized")
    check_quant_dims(target, opts.quant, "--quant")
    if not any((target.path / t).is_file() for t in ("tokenizer.json", "tokenizer.model")):
        raise BuildInputError(f"--target {target.path}: no tokenizer.json or tokenizer.model (needed for "
                              "calibration and serving)")
    if opts.calib is not None:
        from trtspec.builder.calib import check_calib_file

        check_calib_file(Path(opts.calib))
    if opts.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise BuildInputError("--device cuda: no CUDA device is visible to torch (use --device cpu)")
    out = Path(opts.out).expanduser()
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_bundle(out))):
        raise BuildInputError(f"--out {out}: exists and is not a trtspec bundle; choose another directory or "
                              "remove it")
    if out.exists():
        vi.notes.append(f"replacing the existing bundle at {out}")
    need = target.weight_bytes + (draft.weight_bytes if draft else 0)
    check_disk(opts, int(need * (2 if opts.use_cache else 1) + 64 * 2**20))
    return vi
