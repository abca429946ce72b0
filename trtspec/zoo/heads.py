"""The demo target's drafter heads (EAGLE-3, DFlash, DSpark), trained by ``trtspec train-draft``.

    python -m trtspec.zoo.heads                          # retrain all three into trtspec/zoo/demo/<drafter>
    python -m trtspec.zoo.heads --drafter dflash --out /tmp/heads

Each recipe below is a ``trtspec train-draft`` command (the same settings, through the same code): NVIDIA
Model-Optimizer's speculative training on the target's own greedy continuations of standard-library windows
(``--self-distill``), seed 0, one CPU thread. The command, the data, the settings each head was derived with,
the tool versions, the loss history, the time and the held-out acceptance are in ``<drafter>/train_draft.json``
and ``<drafter>/acceptance.json``; the model card's tables are generated from them (:mod:`trtspec.zoo.card`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: ``trtspec train-draft`` options of each shipped head (besides ``--drafter`` and ``--out``).
DEMO_HEADS: dict[str, dict] = {
    "eagle3": {"self_distill": True, "steps": 2500, "batch_size": 4, "seq_len": 128, "lr": 1e-3, "warmup": 50,
               "seed": 0, "threads": 1, "intermediate": 512, "draft_vocab": 1024, "ttt_steps": 3},
    "dflash": {"self_distill": True, "steps": 1500, "batch_size": 4, "seq_len": 128, "lr": 1e-3, "warmup": 50,
               "seed": 0, "threads": 1, "intermediate": 512, "block_size": 8, "anchors": 32},
    "dspark": {"self_distill": True, "steps": 1500, "batch_size": 4, "seq_len": 128, "lr": 1e-3, "warmup": 50,
               "seed": 0, "threads": 1, "intermediate": 512, "block_size": 8, "anchors": 32, "markov_rank": 32},
}


def command(drafter: str, out: str) -> str:
    """The ``trtspec train-draft`` command line of a demo head."""
    parts = ["trtspec train-draft", f"--drafter {drafter}", f"--out {out}"]
    for key, value in DEMO_HEADS[drafter].items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif value is not False:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


def train_head(drafter: str, target: Path, out: Path, *, quiet: bool = False, log=print) -> dict:
    """Train the demo ``drafter`` head for ``target`` into ``out``; returns its training record."""
    from trtspec.train.config import TrainDraftConfig
    from trtspec.train.run import train_draft

    cfg = TrainDraftConfig(drafter=drafter, **DEMO_HEADS[drafter])
    return train_draft(cfg, target, out, command=command(drafter, str(out)), quiet=quiet, log=log)


def main(argv: list[str] | None = None) -> int:
    from . import DEMO_DIR, HEAD_DRAFTERS

    p = argparse.ArgumentParser(prog="python -m trtspec.zoo.heads", description=__doc__.split("\n\n")[0])
    p.add_argument("--drafter", choices=HEAD_DRAFTERS, action="append", help="head(s) to train (default: all)")
    p.add_argument("--target", type=Path, default=DEMO_DIR / "target", help="target directory (default: demo)")
    p.add_argument("--out", type=Path, default=DEMO_DIR, help="parent directory of the heads (default: the demo's)")
    args = p.parse_args(argv)
    for drafter in args.drafter or HEAD_DRAFTERS:
        train_head(drafter, args.target, args.out / drafter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
