"""``DEEPSEEK_MODEL_CARD.md``: the card of the DeepSeek-V3-layout demo target, from its ``measurements.json``.

Checksum rows use :mod:`trtspec.zoo.card`'s format, so :func:`trtspec.zoo.card.verify_checksums` checks them.
"""
from __future__ import annotations

import json
from pathlib import Path

from .card import sha256_file, shipped_files


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _model_lines(c: dict, s: dict, m: dict) -> list[str]:
    return [
        f"## Model (`DeepseekV3ForCausalLM`, untied embeddings, RoPE θ=10000 on interleaved pairs, context "
        f"{c['max_position']})",
        "| part | value |",
        "|---|---|",
        f"| hidden, layers, heads | {s['hidden']}, {s['layers']} (layer{'s' if s['first_k_dense'] > 1 else ''} "
        f"0{'..' + str(s['first_k_dense'] - 1) if s['first_k_dense'] > 1 else ''} dense, the rest MoE), {s['heads']} |",
        f"| MLA | q_lora_rank {s['q_lora_rank']}, kv_lora_rank {s['kv_lora_rank']}, qk_nope_head_dim "
        f"{s['qk_nope_head_dim']}, qk_rope_head_dim {s['qk_rope_head_dim']}, v_head_dim {s['v_head_dim']} "
        f"(latent cache: {s['kv_lora_rank'] + s['qk_rope_head_dim']} values per token and layer) |",
        f"| MoE | {s['n_routed_experts']} routed experts (top-{s['experts_per_tok']}) + {s['n_shared_experts']} shared, "
        f"intermediate {s['moe_intermediate']}; sigmoid router, {s['n_group']} groups, top-{s['topk_group']} groups, "
        f"routed_scaling_factor {s['routed_scaling_factor']}, `e_score_correction_bias` (noaux_tc) |",
        f"| dense MLP | intermediate {s['intermediate']} |",
        f"| MTP | `num_nextn_predict_layers: 1`, stored as `model.layers.{s['layers']}.*` (`enorm`, `hnorm`, `eh_proj`, "
        "an MLA + MoE decoder layer, `shared_head.norm`, `shared_head.head`, `embed_tokens`) |",
        f"| parameters | {m['params']['main'] / 1e6:.2f} M main + {m['params']['mtp'] / 1e6:.2f} M MTP (plus the MTP "
        "layer's stored copies of the embedding and head) |",
        "",
        f"Weights are stored as {c['save_dtype']} (`e_score_correction_bias` in float32); all figures below were "
        "measured after reloading them in float32.",
        "",
    ]


def _training_lines(c: dict, m: dict) -> list[str]:
    w, f, tok = m["wall_s"], m["final_train_loss"], m["tokens_seen"]
    load = m["expert_load_max_over_mean"]
    return [
        "## Training",
        f"AdamW (β=0.9/0.95, weight decay {c['weight_decay']}), lr {c['lr']} with {c['warmup']} warmup steps and cosine "
        f"decay to {c['lr'] * c['min_lr_ratio']:g} in each stage, batch {c['batch_size']} × {c['seq_len']} tokens, "
        f"grad-norm clip 1.0, {c['threads']} CPU thread, float32.",
        "",
        "| stage | steps | tokens seen | final train loss | wall |",
        "|---|---|---|---|---|",
        _row([f"joint: CE(main) + {c['mtp_lambda']} × CE(MTP) (DeepSeek-V3's MTP objective)", c["steps"],
              f"{tok['joint']:,}", f"{f['main']:.3f} main, {f['mtp']:.3f} MTP", f"{w['joint'] / 60:.1f} min"]),
        _row(["MTP alone, main frozen: KL(main's next-next-token distribution ‖ MTP)", c["mtp_distill_steps"],
              f"{tok['mtp_distill']:,}", "-" if f["mtp_distill_kl"] is None else f"{f['mtp_distill_kl']:.3f} (KL)",
              f"{w['mtp_distill'] / 60:.1f} min"]),
        "",
        f"Expert balance: DeepSeek-V3's auxiliary-loss-free rule (each router's `e_score_correction_bias` += "
        f"{c['bias_update_speed']} × sign(mean load − load) after every step); max/mean expert load "
        f"{load['first_25_steps']:.2f} over the first 25 steps, {load['last_25_steps']:.2f} over the last 25.",
        "",
        f"Training wall time: {w['train'] / 60:.1f} min; with measurement: {w.get('total', w['train']) / 60:.1f} min "
        "(one thread of a shared, loaded machine)"
        + (f"; CPU time of training: {sum(m['cpu_s'].values()) / 60:.1f} min." if m.get("cpu_s") else "."),
        "",
    ]


def _acceptance_lines(m: dict, acc: dict, rel: str) -> list[str]:
    a, sp = m["acceptance"], m["speed"]
    al = a["al_by_draft_len"]
    return [
        "## Held-out quality",
        f"On {m['config']['eval_windows']} non-overlapping {m['config']['seq_len']}-token windows of the held-out files:",
        "",
        "| | value |",
        "|---|---|",
        f"| main model, next-token loss (nats/token) | {m['heldout_loss']['main']:.4f} (perplexity "
        f"{m['heldout_ppl']['main']:.2f}) |",
        f"| MTP layer, loss on the token after next | {m['heldout_loss']['mtp']:.4f} |",
        f"| MTP top-1 = the target's own argmax (teacher-forced; the first draft's acceptance rate) | "
        f"{m['mtp_top1_agreement']:.3f} |",
        "",
        "## MTP acceptance (drafter `mtp`: the MTP layer chained D times, greedy chain, trtspec runtime)",
        f"{a['num_prompts']} held-out prompts (the first {a['prompt_tokens']} tokens of held-out functions), "
        f"{a['new_tokens']} new tokens each, all in one batch. AL = tokens per target step including the bonus token; "
        "`greedy match` = fraction of prompts whose output equals the target alone exactly.",
        "",
        "| D | " + " | ".join(str(k) for k in al) + " |",
        "|---|" + "---|" * len(al),
        "| AL | " + " | ".join(f"{v:.3f}" for v in al.values()) + " |",
        "| greedy match | " + " | ".join(f"{v:.2f}" for v in a["greedy_match"].values()) + " |",
        "| CPU tok/s (B=1, CPU time) | " + " | ".join(f"{sp['tok_s_b1'][k]:.0f}" for k in al) + " |",
        "| speedup vs D=0 | " + " | ".join(f"{sp['speedup'][k]:.2f}×" for k in al) + " |",
        "",
        f"D=0 (the target alone): {sp['tok_s_b1']['0']:.0f} tok/s at "
        f"batch 1 over {sp['prompts']} prompts ({sp['threads']} CPU thread; tokens per second of the process's CPU "
        f"time, which on a shared machine is steadier than wall time). Acceptance profile (`trtspec.acceptance/v1`, measured at D={acc['draft_len']}): `{rel}/acceptance.json`, "
        f"conditional rates {', '.join(f'{r:.3f}' for r in acc['rates'])}, mean AL {acc['mean_al']:.3f} over "
        f"{acc['num_steps']} steps.",
        "",
    ]


def write_card(model_dir: Path, card: Path) -> None:
    """Render ``card`` from ``model_dir/measurements.json`` and ``acceptance.json`` (written atomically)."""
    model_dir, card = Path(model_dir), Path(card)
    m = json.loads((model_dir / "measurements.json").read_text())
    acc = json.loads((model_dir / "acceptance.json").read_text())
    c, s, corpus = m["config"], m["config"]["shape"], m["corpus"]
    rel = model_dir.resolve().relative_to(card.parent.resolve()).as_posix()
    lines = [
        "# trtspec second demo target: the DeepSeek-V3 layout (MLA, MoE, one MTP layer)",
        "",
        f"Shipped in `{rel}` (`trtspec.zoo.deepseek_path()`): a code-completion model for Python source in the layout "
        "of DeepSeek-V3 (`DeepseekV3ForCausalLM`, tensor names as TensorRT-LLM, vLLM and SGLang load them), there to "
        "exercise multi-head latent attention, mixture-of-experts routing and MTP drafting (`--drafter mtp`) end to "
        "end: runtime, quantization, bundles, planner. Retrain with `python -m trtspec.zoo.train --arch deepseek-v3` "
        "(deterministic: seed 0, fixed data order; regenerates this card).",
        "",
        "## Data and tokenizer",
        f"The demo pair's (see `MODEL_CARD.md`): Python {corpus['python']} standard library, held-out rule "
        f"`{corpus['heldout_rule']}`, {corpus['num_train_files']} training files ({corpus['train_tokens']:,} tokens, "
        f"list sha256 `{corpus['train_list_sha256']}`), {corpus['num_heldout_files']} "
        f"held-out files ({m['heldout_tokens']:,} tokens); the byte-level BPE tokenizer (vocabulary "
        f"{m['tokenizer']['vocab_size']}) copied from the demo target.",
        "",
        *_model_lines(c, s, m),
        *_training_lines(c, m),
        *_acceptance_lines(m, acc, rel),
        "## Files (sha256)",
        "| file | bytes | sha256 |",
        "|---|---|---|",
    ]
    total = 0
    for path in shipped_files(model_dir):
        size = path.stat().st_size
        total += size
        lines.append(f"| `{path.resolve().relative_to(card.parent.resolve()).as_posix()}` | {size} | {sha256_file(path)} |")
    lines += ["", f"Total: {total / 1e6:.2f} MB.", ""]
    tmp = card.with_name(card.name + ".tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(card)
