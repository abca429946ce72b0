"""``trtspec train-draft``: train an EAGLE-3, DFlash or DSpark drafter for a target with NVIDIA Model-Optimizer."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from trtspec.train.config import DRAFTERS, EXPORT_DTYPES, MARKOV_HEADS, TrainDraftConfig, TrainInputError

_D = TrainDraftConfig.default


def _layer_ids(ctx, param, value):
    if value is None:
        return None
    try:
        return tuple(int(v) for v in value.replace(" ", "").split(","))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated layer ids, got {value!r}") from None


@click.command("train-draft")
@click.option("--target", type=click.Path(file_okay=False, path_type=Path),
              help="Target model directory (Hugging Face: config.json, *.safetensors, tokenizer.json). Default: the "
                   "demo target.")
@click.option("--drafter", type=click.Choice(DRAFTERS), required=True, help="The drafter to train.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Output directory (written to a temporary sibling and renamed when complete).")
@click.option("--data", type=click.Path(dir_okay=False, path_type=Path),
              help="Training text: .jsonl (a string or {text|prompt|content} per line) or .parquet (a 'text' column). "
                   "Default: the built-in sample (the Python standard library's sources).")
@click.option("--self-distill", is_flag=True,
              help="Train on the target's own greedy continuations of the data's first --prompt-tokens tokens.")
@click.option("--prompt-tokens", type=int, default=_D("prompt_tokens"), show_default=True,
              help="Tokens of each sequence kept as the prompt under --self-distill.")
@click.option("--steps", type=int, default=_D("steps"), show_default=True, help="Optimizer steps.")
@click.option("--batch-size", type=int, default=_D("batch_size"), show_default=True, help="Sequences per step.")
@click.option("--seq-len", type=int, default=_D("seq_len"), show_default=True,
              help="Tokens per sequence (DFlash / DSpark: a multiple of --block-size).")
@click.option("--lr", type=float, default=_D("lr"), show_default=True,
              help="Peak learning rate (AdamW; linear warmup over --warmup steps, cosine to 0.1x).")
@click.option("--warmup", type=int, default=_D("warmup"), show_default=True, help="Warmup steps.")
@click.option("--seed", type=int, default=_D("seed"), show_default=True,
              help="Seed of data order, initialisation and anchor sampling.")
@click.option("--device", default=_D("device"), show_default=True, help="cpu | cuda | cuda:N.")
@click.option("--threads", type=int, default=_D("threads"), show_default=True,
              help="CPU threads for torch (0 = torch's default).")
@click.option("--draft-layers", type=int, help="Draft decoder layers (default: EAGLE-3 1; DFlash / DSpark "
                                               "clamp(target layers // 3, 1, 5)).")
@click.option("--intermediate", type=int, help="Draft MLP width (default: the target's).")
@click.option("--layer-ids", callback=_layer_ids,
              help="Target layers fused by fc, e.g. '1,3,5' (default: EAGLE-3 (1, L//2, L-1); DFlash / DSpark one "
                   "per draft layer, spread over 1..L-2).")
@click.option("--draft-vocab", type=int, help="EAGLE-3 draft vocabulary (0 = full; default: full up to 32768 "
                                              "tokens, else the 32000 most frequent).")
@click.option("--ttt-steps", type=int, default=_D("ttt_steps"), show_default=True,
              help="EAGLE-3 training-time-test steps.")
@click.option("--block-size", type=int, default=_D("block_size"), show_default=True,
              help="DFlash / DSpark block: DFlash drafts block-1 tokens, DSpark block tokens.")
@click.option("--anchors", type=int, help="DFlash / DSpark blocks sampled per sequence and step (default: "
                                          "Model-Optimizer's 512, capped by the sequence length).")
@click.option("--mask-token", help="DFlash / DSpark mask token (id or token string; default: the tokenizer's "
                                   "mask token, else an unused vocabulary row, else an unused special token).")
@click.option("--markov-rank", type=int, default=_D("markov_rank"), show_default=True, help="DSpark Markov head rank.")
@click.option("--markov-head", type=click.Choice(MARKOV_HEADS), default=_D("markov_head"), show_default=True,
              help="DSpark Markov head type.")
@click.option("--confidence-head/--no-confidence-head", default=_D("confidence_head"), show_default=True,
              help="DSpark confidence head (trained on the analytical accept rate).")
@click.option("--eval-prompts", type=int, default=_D("eval_prompts"), show_default=True,
              help="Held-out prompts of the acceptance check.")
@click.option("--eval-new-tokens", type=int, default=_D("eval_new_tokens"), show_default=True,
              help="New tokens per prompt in the acceptance check.")
@click.option("--eval-draft-len", type=int,
              help="D of the acceptance check (default: the block's drafts; EAGLE-3: 8).")
@click.option("--dtype", type=click.Choice(EXPORT_DTYPES), default=_D("dtype"), show_default=True,
              help="Weights of the export.")
@click.option("--json", "as_json", is_flag=True, help="Print the training record (train_draft.json) as JSON; "
                                                      "log lines instead of progress bars, on stderr.")
def train_draft(target, drafter, out, data, self_distill, prompt_tokens, steps, batch_size, seq_len, lr, warmup, seed,
                device, threads, draft_layers, intermediate, layer_ids, draft_vocab, ttt_steps, block_size, anchors, mask_token,
                markov_rank, markov_head, confidence_head, eval_prompts, eval_new_tokens, eval_draft_len, dtype,
                as_json):
    """Train a DRAFTER for --target with NVIDIA Model-Optimizer (convert, its loss, its export), correct the
    export, and check acceptance on held-out prompts with the local runtime (acceptance.json)."""
    from trtspec.builder.interrupt import exit_code
    from trtspec.train.run import train_draft as run

    if target is None:
        from trtspec.zoo import demo_paths

        target = demo_paths()[0]
    try:
        cfg = TrainDraftConfig(drafter=drafter, steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr,
                               warmup=min(warmup, steps), seed=seed, device=device, threads=threads, data=data,
                               self_distill=self_distill, prompt_tokens=prompt_tokens, draft_layers=draft_layers,
                               intermediate=intermediate, layer_ids=layer_ids, draft_vocab=draft_vocab,
                               ttt_steps=ttt_steps, block_size=block_size, anchors=anchors, mask_token=mask_token,
                               markov_rank=markov_rank, markov_head=markov_head, confidence_head=confidence_head,
                               eval_prompts=eval_prompts, eval_new_tokens=eval_new_tokens,
                               eval_draft_len=eval_draft_len, dtype=dtype)
    except TrainInputError as e:
        raise click.UsageError(str(e)) from None
    log = (lambda s: click.echo(s, err=True)) if as_json else click.echo
    command = "trtspec " + shlex.join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("trtspec") else ""
    try:
        record = run(cfg, target, out, command=command, quiet=as_json, log=log)
    except TrainInputError as e:
        raise click.UsageError(str(e)) from None
    except KeyboardInterrupt as e:
        click.echo(f"interrupted; {out} left as it was", err=True)
        sys.exit(exit_code(e))
    if as_json:
        click.echo(json.dumps(record, indent=2))
        return
    acc = record["acceptance"]
    click.echo(f"wrote {out}: {drafter} head, {record['params'] / 1e6:.2f} M parameters, trained "
               f"{record['wall_s']['train'] / 60:.1f} min; AL {acc['mean_al']:.3f} at D={acc['draft_len']} on "
               f"{acc['prompts']} held-out prompts (greedy output identical to the target's: {acc['greedy_match']:.0%})")
