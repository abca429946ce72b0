"""The optimizer loop over a converted model: its ``forward`` computes Model-Optimizer's loss; AdamW, linear
warmup then cosine decay, gradient-norm clip 1.0, a rich progress bar with the loss and training accuracy."""
from __future__ import annotations

import math
import time

from trtspec.train.config import TrainDraftConfig


def lr_at(step: int, cfg: TrainDraftConfig) -> float:
    """Learning rate of optimizer step ``step`` (0-based)."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    lo = cfg.min_lr_ratio
    return cfg.lr * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * frac)))


def _accuracy(out) -> float:
    """Mean training accuracy Model-Optimizer reports (``train_acc``: per TTT step for EAGLE, one for DFlash)."""
    acc = out.get("train_acc") if hasattr(out, "get") else getattr(out, "train_acc", None)
    flat = [float(a) for row in (acc or []) for a in (row if isinstance(row, (list, tuple)) else [row])]
    return sum(flat) / len(flat) if flat else float("nan")


def train(model, params, seqs, cfg: TrainDraftConfig, *, quiet: bool = False, log=print) -> list[dict]:
    """Run ``cfg.steps`` steps on batches of ``seqs [N, seq_len]`` (seeded order); returns a log record every
    25 steps (mean loss, mean accuracy, seconds)."""
    import torch

    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": other, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(cfg.seed + 7)
    device = next(iter(params)).device
    history, losses, accs = [], [], []
    model.train()
    t0 = time.perf_counter()
    with _bar(quiet, cfg.steps) as bar:
        for step in range(cfg.steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(step, cfg)
            idx = torch.randint(0, seqs.shape[0], (cfg.batch_size,), generator=gen)
            out = model(input_ids=seqs[idx].to(device))
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses.append(float(out.loss.detach()))
            accs.append(_accuracy(out))
            bar(step + 1, losses[-1], accs[-1])
            if (step + 1) % 25 == 0 or step + 1 == cfg.steps:
                rec = {"step": step + 1, "loss": sum(losses) / len(losses), "accuracy": sum(accs) / len(accs),
                       "lr": lr_at(step, cfg), "s": round(time.perf_counter() - t0, 1)}
                history.append(rec)
                if quiet or bar.plain:              # no live bar (quiet, or output is not a terminal): log lines
                    log(f"step {rec['step']}/{cfg.steps} loss {rec['loss']:.4f} accuracy {rec['accuracy']:.3f} "
                        f"{rec['s']:.0f}s")
                losses, accs = [], []
    model.eval()
    return history


class _bar:
    """rich progress over steps with the last loss and accuracy: ``bar(step, loss, accuracy)``; ``bar.plain`` is
    True when nothing is drawn live (quiet, or the console is not interactive, e.g. output to a file)."""

    def __init__(self, quiet: bool, total: int):
        self.quiet, self.total, self.progress = quiet, total, None

    def __enter__(self):
        from rich.console import Console

        self.plain = self.quiet or not Console().is_interactive
        if self.plain:
            return self
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn

        self.progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("loss {task.fields[loss]} accuracy {task.fields[acc]}"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), transient=False)
        self.progress.start()
        self.task = self.progress.add_task("train", total=self.total, loss="-", acc="-")
        return self

    def __call__(self, step: int, loss: float, acc: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, loss=f"{loss:.4f}", acc=f"{acc:.3f}")

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()
        return False

