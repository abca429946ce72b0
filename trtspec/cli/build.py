"""``trtspec build``: quantize a target (and draft) with Model-Optimizer and write a deployment bundle."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from trtspec.builder.engine_facts import VERSIONS
from trtspec.builder.options import (BACKENDS, DRAFTERS, KV_QUANTS, QUANTS, SPECULATION_MODES, VERIFY_METHODS,
                                     BuildOptions, help_of)
from trtspec.cli.parallel import parallel_options

_D = BuildOptions.model_fields


def _default(name):
    return _D[name].get_default(call_default_factory=True)


@click.command("build")
@click.option("--target", type=click.Path(path_type=Path), default=None, help=help_of("target"))
@click.option("--draft", type=click.Path(path_type=Path), default=None, help=help_of("draft"))
@click.option("--drafter", type=click.Choice(DRAFTERS), default=_default("drafter"), help=help_of("drafter"))
@click.option("--quant", type=click.Choice(QUANTS), default=_default("quant"), help=help_of("quant"))
@click.option("--draft-quant", type=click.Choice(QUANTS), default=_default("draft_quant"), help=help_of("draft_quant"))
@click.option("--kv-cache-quant", type=click.Choice(KV_QUANTS), default=_default("kv_cache_quant"),
              help=help_of("kv_cache_quant"))
@click.option("--calib", type=click.Path(path_type=Path), default=None, help=help_of("calib"))
@click.option("--calib-samples", type=int, default=_default("calib_samples"), help=help_of("calib_samples"))
@click.option("--calib-seq-len", type=int, default=_default("calib_seq_len"), help=help_of("calib_seq_len"))
@click.option("--gpu", default=_default("gpu"), help=help_of("gpu"))
@parallel_options
@click.option("--max-batch-size", type=int, default=_default("max_batch_size"), help=help_of("max_batch_size"))
@click.option("--max-seq-len", type=int, default=_default("max_seq_len"), help=help_of("max_seq_len"))
@click.option("--recipe", default=_default("recipe"), help=help_of("recipe"))
@click.option("--acceptance", default=None, help=help_of("acceptance"))
@click.option("--calibration", type=click.Path(path_type=Path, exists=True, dir_okay=False), default=None,
              help=help_of("calibration"))
@click.option("--measure-prompts", type=int, default=None, help=help_of("measure_prompts"))
@click.option("--measure-new-tokens", type=int, default=_default("measure_new_tokens"),
              help=help_of("measure_new_tokens"))
@click.option("--trtllm-version", default=_default("trtllm_version"),
              help=help_of("trtllm_version") + f" Known: {', '.join(VERSIONS['trtllm'])}.")
@click.option("--vllm-version", default=_default("vllm_version"),
              help=help_of("vllm_version") + f" Known: {', '.join(VERSIONS['vllm'])}.")
@click.option("--sglang-version", default=_default("sglang_version"),
              help=help_of("sglang_version") + f" Known: {', '.join(VERSIONS['sglang'])}.")
@click.option("--speculation", type=click.Choice(SPECULATION_MODES), default=_default("speculation"),
              help=help_of("speculation"))
@click.option("--backend", type=click.Choice(BACKENDS), default=_default("backend"), help=help_of("backend"))
@click.option("--verify", type=click.Choice(VERIFY_METHODS), default=_default("verify"), help=help_of("verify"))
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default=_default("device"), help=help_of("device"))
@click.option("--out", type=click.Path(path_type=Path), default=_default("out"), help=help_of("out"))
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help=help_of("cache_dir"))
@click.option("--no-cache", is_flag=True, help="Neither reuse nor fill the quantized-checkpoint cache.")
@click.option("--dry-run", is_flag=True, help="Print the plan (stages, recipe, outputs) and stop.")
@click.option("--smoke-test", is_flag=True, help="Load the bundle with tensorrt_llm.LLM and generate a few tokens "
              "(needs TensorRT-LLM and a GPU).")
@click.option("--json", "as_json", is_flag=True, help="Print the result (plan or manifest) as JSON on stdout.")
def build(target, draft, drafter, quant, draft_quant, kv_cache_quant, calib, calib_samples, calib_seq_len, gpu, tp, ep,
          max_batch_size, max_seq_len, recipe, acceptance, calibration, measure_prompts, measure_new_tokens,
          trtllm_version, vllm_version, sglang_version, speculation, backend, verify, device, out, cache_dir, no_cache,
          dry_run, smoke_test, as_json):
    """Validate the pair, resolve the recipe, quantize with Model-Optimizer, export unified HF
    checkpoints and write llm_api.yaml / vllm.yaml / sglang.args / recipe.yaml / manifest.json /
    README.md into --out, atomically. With no arguments: the demo pair for an H200."""
    from pydantic import ValidationError
    from rich.console import Console

    from trtspec.builder.interrupt import exit_code
    from trtspec.builder.pipeline import BuildError, build as run_build
    from trtspec.builder.validate import BuildInputError

    console = Console(stderr=True)
    fields = dict(target=target, draft=draft, drafter=drafter, quant=quant, draft_quant=draft_quant,
                  kv_cache_quant=kv_cache_quant, calib=calib, calib_samples=calib_samples,
                  calib_seq_len=calib_seq_len, gpu=gpu, tp=tp, ep=ep, max_batch_size=max_batch_size,
                  max_seq_len=max_seq_len, recipe=recipe, acceptance=acceptance, calibration=calibration,
                  measure_prompts=measure_prompts,
                  measure_new_tokens=measure_new_tokens, trtllm_version=trtllm_version, vllm_version=vllm_version,
                  sglang_version=sglang_version, speculation=speculation, backend=backend, verify=verify,
                  device=device,
                  out=out,
                  use_cache=not no_cache)
    if cache_dir is not None:
        fields["cache_dir"] = cache_dir
    try:
        opts = BuildOptions(**fields)
    except ValidationError as e:
        raise click.UsageError("; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())) from None

    try:  # SIGINT / SIGTERM: the build removes its temporary bundle and raises BuildInterrupted
        result = run_build(opts, dry_run=dry_run, console=console)
    except (BuildInputError, ValueError) as e:
        raise click.UsageError(str(e)) from None
    except BuildError as e:
        console.print(f"[red]✗ {e}[/red]\nNothing was written to {out}.", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt as e:
        console.print(f"[red]✗ {e or 'interrupted'}[/red]: nothing was written to {out}.", highlight=False)
        sys.exit(exit_code(e))
    if dry_run:
        if as_json:
            click.echo(json.dumps(result.plan, indent=2, default=str))
        else:
            _print_plan(console, result.plan)
        return
    if smoke_test:
        console.print(verify_bundle(result.out), highlight=False)
    if as_json:
        click.echo(json.dumps(result.manifest, indent=2))
    else:
        console.print(f"[bold]bundle[/bold] {result.out}  (serve: cd {result.out} && trtllm-serve ./target "
                      "--config llm_api.yaml)", highlight=False)


def _print_plan(console, plan: dict) -> None:
    console.print(f"[bold]plan[/bold] -> {plan['out']}", highlight=False)
    console.print(f"  stages:  {' -> '.join(plan['stages'])}", highlight=False)
    console.print(f"  recipe:  {plan['recipe']}", highlight=False)
    for q in plan["quantize"]:
        console.print(f"  quantize {q['role']}: {q['quant']} ({q['modelopt_config']}) kv {q['kv_cache_quant']}, "
                      f"cache {q['cache']}", highlight=False)
    console.print(f"  outputs: {', '.join(plan['outputs'])}", highlight=False)
    for n in plan["notes"]:
        console.print(f"  note:    {n}", highlight=False)


def verify_bundle(bundle: Path) -> str:
    """Load the bundle with ``tensorrt_llm.LLM`` and generate 8 tokens, or say why that cannot run here."""
    import importlib.util

    if importlib.util.find_spec("tensorrt_llm") is None:
        return "verify: skipped - this step needs TensorRT-LLM (not installed) and a GPU"
    import torch

    if not torch.cuda.is_available():
        return "verify: skipped - this step needs a GPU (none visible)"
    import os

    import yaml
    from tensorrt_llm import LLM, SamplingParams

    cwd = os.getcwd()
    os.chdir(bundle)
    try:
        llm = LLM(model="./target", **yaml.safe_load(open("llm_api.yaml")))
        out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=8))
        return f"verify: ok - {out[0].outputs[0].text!r}"
    finally:
        os.chdir(cwd)
