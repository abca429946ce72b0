"""``trtspec triton``: write a Triton model repository for a bundle; ``trtspec triton install-server``."""
from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.triton.protocol import VERIFY_METHODS, ModelSettings

_DEFAULTS = ModelSettings(bundle=Path("."))


@click.group(invoke_without_command=True)
@click.option("--bundle", type=click.Path(file_okay=False, path_type=Path), help="trtspec bundle directory (output of `trtspec build`).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Model repository to write (created; other models kept).")
@click.option("--model-name", default="trtspec", show_default=True, help="Triton model name.")
@click.option("--backend", type=click.Choice(["auto", "trtspec", "tensorrt_llm"]), default=_DEFAULTS.backend,
              show_default=True, help="auto: TensorRT-LLM when importable with a GPU, else the trtspec runtime.")
@click.option("--max-tokens-limit", type=click.IntRange(min=1), default=None,
              help="Largest sampling_param_max_tokens accepted [default: min(1024, context/2)].")
@click.option("--max-active", type=click.IntRange(min=1), default=_DEFAULTS.max_active, show_default=True,
              help="Requests the trtspec runtime decodes together (continuous batching).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=_DEFAULTS.device, show_default=True,
              help="Where the trtspec runtime runs (auto: cuda when torch sees a GPU).")
@click.option("--verify", type=click.Choice(VERIFY_METHODS), default=_DEFAULTS.verify, show_default=True,
              help="trtspec runtime: greedy (a step with a sampled request is verified by sample), sample "
                   "(lossless rejection sampling) or block (block verification, chains).")
@click.option("--draft-len", type=click.IntRange(min=0), default=None,
              help="trtspec runtime: a fixed draft length (0 = no speculation) [default: the bundle's].")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.pass_context
def triton(ctx, bundle, out, model_name, backend, max_tokens_limit, max_active, device, verify, draft_len, as_json):
    """Write a Triton model repository (Python backend, decoupled) serving a trtspec bundle.

    The model's tensors are named like TensorRT-LLM's LLM-API Triton model (text_input,
    sampling_param_*, stream -> text_output, acceptance_rate, ...). On a GPU with TensorRT-LLM it
    serves through tensorrt_llm.LLM and the bundle's llm_api.yaml, elsewhere through the trtspec runtime.
    """
    if ctx.invoked_subcommand is not None:
        return
    if bundle is None or out is None:
        raise click.UsageError("--bundle and --out are required (or run `trtspec triton install-server`)")
    from dataclasses import replace

    from trtspec.triton.bundle import BundleError
    from trtspec.triton.repository import default_settings, write_repository

    try:
        settings = replace(default_settings(bundle), backend=backend, max_active=max_active, device=device,
                           verify=verify, draft_len=draft_len)
        if max_tokens_limit is not None:
            settings = replace(settings, max_tokens_limit=max_tokens_limit,
                               default_max_tokens=min(settings.default_max_tokens, max_tokens_limit))
        model_dir = write_repository(bundle, out, model_name, settings=settings)
    except (BundleError, ValueError) as e:
        raise click.BadParameter(str(e)) from e
    result = {"repository": str(model_dir.parent), "model": model_name, "model_dir": str(model_dir),
              "settings": settings.to_dict()}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        click.echo(f"wrote {model_dir} (serve: tritonserver --model-repository={model_dir.parent})")


@triton.command("install-server")
@click.option("--force", is_flag=True, help="Reinstall even when a complete install exists.")
@click.option("--wheel", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Unpack this local nvidia-pytriton wheel instead of downloading it.")
def install_server_cmd(force, wheel):
    """Unpack a standalone tritonserver from the nvidia-pytriton wheel into the trtspec cache
    (the wheel is not installed: this environment keeps its numpy and protobuf)."""
    from trtspec.triton.install import install_server

    root = install_server(force=force, wheel=wheel)
    click.echo(root / "pytriton" / "tritonserver" / "bin" / "tritonserver")
