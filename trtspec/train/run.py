"""``train_draft``: check -> data -> convert -> train -> export -> correct -> acceptance check, into a temporary
directory renamed onto ``--out`` only when everything succeeded (Ctrl-C or SIGTERM leave ``--out`` as it was).

The output directory holds the export (``config.json``, ``model.safetensors``), ``acceptance.json`` (the
held-out check, ``trtspec.acceptance/v1``) and ``train_draft.json``: the command, every setting and how it
was derived, the data, the tool versions, the corrections made to the export, the loss history, the times.
"""
from __future__ import annotations

import contextlib
import json
import platform
import sys
import time
from pathlib import Path

from trtspec.runtime.drafters.block import TRAIN_RECORD as RECORD, vocab_digest
from trtspec.train.config import TrainDraftConfig, TrainInputError
from trtspec.train.derive import Derived, TargetInfo



def check_inputs(cfg: TrainDraftConfig, target: Path, out: Path) -> tuple[TargetInfo, Derived]:
    """Everything checkable before any weight loads or data is read; raises TrainInputError naming the option."""
    from trtspec.train.derive import derive

    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise TrainInputError(f"--device {cfg.device}: torch sees no CUDA device")
    elif cfg.device != "cpu":
        raise TrainInputError(f"--device: expected cpu or cuda[:N], got {cfg.device!r}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TrainInputError(f"--out {out}: exists and is not a directory")
    t = TargetInfo.read(target)
    ctx = int(t.config.get("max_position_embeddings", 2048))
    if cfg.seq_len > ctx:
        raise TrainInputError(f"--seq-len {cfg.seq_len} exceeds the target's context ({ctx} tokens)")
    if cfg.eval_prompt_tokens + cfg.eval_new_tokens > ctx:
        raise TrainInputError(f"--eval-prompt-tokens + --eval-new-tokens exceed the target's context ({ctx})")
    d = derive(cfg, t)
    if cfg.eval_draft_len is not None and cfg.drafter != "eagle3":
        from trtspec.runtime.block_head import block_drafts

        if cfg.eval_draft_len > block_drafts(cfg.drafter, cfg.block_size):
            raise TrainInputError(f"--eval-draft-len {cfg.eval_draft_len} exceeds the "
                                  f"{block_drafts(cfg.drafter, cfg.block_size)} drafts of a {cfg.drafter} block of "
                                  f"{cfg.block_size}")
    return t, d


def _versions() -> dict:
    import modelopt
    import torch
    import transformers

    return {"nvidia-modelopt": modelopt.__version__, "transformers": transformers.__version__,
            "torch": torch.__version__, "python": platform.python_version()}


def train_draft(cfg: TrainDraftConfig, target: Path, out: Path, *, command: str = "", quiet: bool = False,
                log=print) -> dict:
    """Train ``cfg.drafter`` for ``target`` into ``out``; returns the record written as ``train_draft.json``."""
    import torch

    from trtspec.builder.bundle import AtomicDir
    from trtspec.builder.interrupt import interruptible

    target, out = Path(target), Path(out)
    t, d = check_inputs(cfg, target, out)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    t_start = time.perf_counter()
    # Model-Optimizer prints progress with print(): keep stdout for the command's own output (--json)
    with interruptible(), contextlib.redirect_stdout(sys.stderr), AtomicDir(out) as tmp:
        record = _train_into(cfg, t, d, tmp, quiet=quiet, log=log)
        record.update(command=command, out=str(out), wall_s={**record["wall_s"],
                                                              "total": round(time.perf_counter() - t_start, 1)})
        (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return record


def _train_into(cfg: TrainDraftConfig, t: TargetInfo, d: Derived, tmp: Path, *, quiet: bool, log) -> dict:
    import torch

    from trtspec.train import acceptance, data, derive, export, loop, modelopt_model

    torch.manual_seed(cfg.seed)
    times = {}
    t0 = time.perf_counter()
    corpus = data.load_corpus(cfg, t.path)
    seqs = data.windows(corpus.stream, cfg)
    if cfg.self_distill:
        log(f"self-distillation: the target continues {seqs.shape[0]} prompts of {cfg.prompt_tokens} tokens")
        with _counter(quiet, "self-distillation", seqs.shape[0]) as advance:
            seqs = data.self_distill(t.path, seqs, cfg, progress=advance)
    times["data"] = round(time.perf_counter() - t0, 1)
    counts = torch.bincount(seqs.flatten(), minlength=t.vocab)[:t.vocab]
    draft_ids = d2t = None
    if cfg.drafter == "eagle3":
        d.draft_vocab, d.notes["draft_vocab"] = derive.draft_vocab_size(cfg, t)
        if d.draft_vocab < t.vocab:
            draft_ids, d2t = derive.choose_draft_vocab(counts, d.draft_vocab)
            d.notes["draft_vocab_coverage"] = round(float(counts[draft_ids].sum() / counts.sum()), 6)
    else:
        d.mask_token_id, d.notes["mask_token"] = derive.choose_mask_token(cfg, t, counts)
    log(f"{cfg.drafter} for {t.path}: layers {list(d.layer_ids)}, draft layers {d.draft_layers}, "
        f"intermediate {d.intermediate}" + (f", draft vocab {d.draft_vocab}" if cfg.drafter == "eagle3" else
                                             f", block {cfg.block_size}, mask token {d.mask_token_id}"))
    t0 = time.perf_counter()
    model = modelopt_model.load_target(t, cfg.device)
    conf = modelopt_model.convert(model, cfg, t, d, draft_ids=draft_ids, d2t=d2t)
    params = modelopt_model.draft_parameters(model)
    history = loop.train(model, params, seqs, cfg, quiet=quiet, log=log)
    times["train"] = round(time.perf_counter() - t0, 1)
    export.export(model, tmp, cfg.dtype)
    fixes = export.fix(tmp, cfg.drafter, t, cfg.dtype)
    for f in fixes:
        log(f"export corrected: {f}")
    del model
    export.check_loads(tmp, cfg.drafter, t.path)
    t0 = time.perf_counter()
    D = cfg.eval_draft_len or (8 if cfg.drafter == "eagle3" else _block_drafts(cfg))
    res = acceptance.measure(t.path, tmp, cfg.drafter, corpus.prompts, D, cfg.eval_new_tokens, cfg.device)
    prof = acceptance.profile(res, cfg.drafter, D, source=(
        f"trtspec train-draft: greedy chain speculative decoding on the trtspec runtime, target {t.path.name} + this "
        f"{cfg.drafter} head, {len(corpus.prompts)} held-out prompts x {cfg.eval_new_tokens} new tokens, D={D}, "
        f"fp32 on {cfg.device}; data: {corpus.source}"))
    (tmp / "acceptance.json").write_text(json.dumps(prof, indent=2) + "\n")
    times["acceptance"] = round(time.perf_counter() - t0, 1)
    log(f"acceptance on {len(corpus.prompts)} held-out prompts at D={D}: AL {prof['mean_al']:.3f}, expected AL by D "
        + ", ".join(f"{k}: {v:.2f}" for k, v in prof["al_by_draft_len"].items())
        + f"; outputs equal to the target's greedy: {res['greedy_match']:.0%}")
    return {
        "format": "trtspec.train_draft/v1", "drafter": cfg.drafter, "target": str(t.path),
        "target_tokenizer_vocab_sha256": vocab_digest(t.tokenizer_vocab),
        "config": cfg.to_dict(), "derived": {"layer_ids": list(d.layer_ids), "draft_layers": d.draft_layers,
                                             "intermediate": d.intermediate, "draft_vocab": d.draft_vocab,
                                             "mask_token_id": d.mask_token_id, "how": d.notes},
        "modelopt_convert_config": conf, "data": {"source": corpus.source, "sequences": int(seqs.shape[0]),
                                                  "seq_len": cfg.seq_len, "self_distill": cfg.self_distill,
                                                  "tokens_seen": cfg.steps * cfg.batch_size * cfg.seq_len},
        "versions": _versions(), "export_fixes": fixes, "history": history,
        "acceptance": {"draft_len": D, "mean_al": prof["mean_al"], "al_by_draft_len": prof["al_by_draft_len"],
                       "greedy_match": res["greedy_match"], "prompts": len(corpus.prompts)},
        "params": sum(p.numel() for p in params), "wall_s": times, "argv": sys.argv[1:],
    }


def _block_drafts(cfg: TrainDraftConfig) -> int:
    from trtspec.runtime.block_head import block_drafts

    return block_drafts(cfg.drafter, cfg.block_size)


@contextlib.contextmanager
def _counter(quiet: bool, what: str, total: int):
    """A rich progress bar advanced by the yielded callable (a no-op callable when quiet)."""
    if quiet:
        yield lambda n: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)
