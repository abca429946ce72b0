"""``trtspec serve``: serve a bundle with a real tritonserver on loopback until Ctrl-C."""
from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.triton.protocol import SPECULATION_MODES, VERIFY_METHODS, ModelSettings
from trtspec.triton.server import ServeConfig

_D = ServeConfig()
_M = ModelSettings(bundle=Path("."))


def _port(name: str, default: int):
    return click.option(f"--{name}-port", type=click.IntRange(0, 65535), default=default, show_default=True,
                        help=f"{name.upper()} port (0 = choose a free one).")


@click.command()
@click.option("--bundle", required=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="trtspec bundle directory (output of `trtspec build`).")
@_port("http", _D.http_port)
@_port("grpc", _D.grpc_port)
@_port("metrics", _D.metrics_port)
@click.option("--host", default=_D.host, show_default=True, help="Address to bind.")
@click.option("--model-name", default=_D.model_name, show_default=True, help="Triton model name.")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write the model repository here and keep it [default: a temporary folder].")
@click.option("--ready-timeout", type=click.FloatRange(min=1), default=_D.ready_timeout_s, show_default=True,
              help="Seconds to wait for the model to load.")
@click.option("--verify", type=click.Choice(VERIFY_METHODS), default=_M.verify, show_default=True,
              help="trtspec runtime: greedy (a step with a sampled request is verified by sample), sample "
                   "(lossless rejection sampling) or block (block verification, chains).")
@click.option("--draft-len", type=click.IntRange(min=0), default=None,
              help="trtspec runtime: a fixed draft length (0 = no speculation) [default: the bundle's].")
@click.option("--speculation", type=click.Choice(SPECULATION_MODES), default=_M.speculation, show_default=True,
              help="trtspec runtime: static (the bundle's schedule, or --draft-len) or adaptive (each step's draft "
                   "lengths up to that D, chosen from the device's step costs and each request's live acceptance).")
@click.option("--cost-table", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--speculation adaptive: the device's step costs (`trtspec profile --verify greedy,sample`) "
                   "[default: the bundle's cost_table.json, else measured when the model loads].")
@click.option("--json", "as_json", is_flag=True, help="Print the endpoints as one JSON line once ready.")
def serve(bundle, http_port, grpc_port, metrics_port, host, model_name, repo, ready_timeout, verify, draft_len,
          speculation, cost_table, as_json):
    """Serve BUNDLE with tritonserver: write its model repository, start the server, wait until the
    model is ready, print the endpoints, and stop cleanly on Ctrl-C (SIGINT) or SIGTERM."""
    import shutil
    import signal
    import tempfile
    import threading
    from dataclasses import replace

    from trtspec.triton.bundle import BundleError
    from trtspec.triton.repository import default_settings, write_repository
    from trtspec.triton.server import ServerNotFoundError, TritonServer, find_server

    try:
        cfg = ServeConfig(host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                          model_name=model_name, ready_timeout_s=ready_timeout)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    try:
        install = find_server()
    except ServerNotFoundError as e:
        raise click.ClickException(str(e)) from None
    tmp = None if repo is not None else Path(tempfile.mkdtemp(prefix="trtspec-triton-"))
    repository = repo if repo is not None else tmp
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    server = None
    try:
        try:
            settings = replace(default_settings(bundle), verify=verify, draft_len=draft_len, speculation=speculation,
                               cost_table=None if cost_table is None else cost_table.resolve())
            write_repository(bundle, repository, cfg.model_name, settings=settings)
        except (BundleError, ValueError) as e:
            raise click.BadParameter(str(e), param_hint="--bundle") from e
        server = TritonServer(repository, install=install, host=cfg.host, http_port=cfg.http_port,
                              grpc_port=cfg.grpc_port, metrics_port=cfg.metrics_port)
        click.echo(f"starting tritonserver ({install.origin}: {install.binary})", err=True)
        from rich.console import Console

        with Console(stderr=True).status(f"loading model {cfg.model_name} from {bundle}"):
            try:
                server.start(timeout=cfg.ready_timeout_s)
            except (RuntimeError, TimeoutError) as e:
                raise click.ClickException(str(e)) from None
        info = {"model": cfg.model_name, "http": f"http://{server.http_url}", "grpc": server.grpc_url,
                "metrics": server.metrics_url, "generate": f"http://{server.http_url}/v2/models/{cfg.model_name}/generate",
                "repository": str(repository), "log": str(server.log_path), "pid": server.process.pid}
        if as_json:
            click.echo(json.dumps(info), nl=True)
        else:
            click.echo(f"ready: model {cfg.model_name!r}\n  HTTP     {info['http']}\n  gRPC     {info['grpc']}\n"
                       f"  metrics  {info['metrics']}\n  generate {info['generate']}\n  log      {info['log']}\n"
                       "Ctrl-C stops the server.")
        while not stop.wait(0.5):
            if server.process is None or server.process.poll() is not None:
                code = server.process.returncode if server.process else None
                raise click.ClickException(f"tritonserver exited with code {code}; log {server.log_path}:\n"
                                           f"{server.log_tail()}")
        click.echo("stopping tritonserver", err=True)
    finally:
        if server is not None:
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
