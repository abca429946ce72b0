"""Serving latency and throughput through a real tritonserver: greedy and sampled loads, with and
without speculation, side by side in one run.

One server, one repository holding the bundle twice: ``spec`` (the bundle's speculation) and
``base`` (``draft_len: 0``, plain decoding of the same target). Each load sends ``--requests``
requests from ``--concurrency`` client threads over the HTTP generate endpoint; loads alternate
between the two models ``--repeats`` times and the per-request latencies are pooled. Tokens/s
comes from the model's ``trtspec_generation_tokens_total`` counter over the load's wall time, AL
from its ``trtspec_spec_decode_*`` counters (1 + accepted / drafts).

    python benchmarks/bench_serve.py [--bundle DIR] [--concurrency 16] [--requests 64]
        [--max-tokens 32] [--temperature 0.8] [--top-p 0.95] [--repeats 2] [--json]

With no --bundle it serves the demo pair (``trtspec.zoo.demo_paths()``) laid out as a bundle with a
fixed draft length ``--draft-len`` (default 4). Needs a tritonserver (``trtspec triton install-server``).
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

PROMPTS = [
    "def fibonacci(n):\n", "import os\nimport sys\n\n", "class Stack:\n    def __init__(self):\n",
    "def read_json(path):\n", "for i in range(10):\n", "def merge_sort(items):\n", "with open(path) as f:\n",
    "def parse_args(argv):\n", "try:\n    import numpy as np\n", "def is_prime(n):\n",
]
MODELS = ("spec", "base")


def demo_bundle(root: Path, draft_len: int) -> Path:
    """The demo pair as a bundle (target/, draft/, llm_api.yaml) with a fixed draft length."""
    import yaml

    from trtspec.zoo import demo_paths

    target, draft = demo_paths()
    root.mkdir(parents=True, exist_ok=True)
    (root / "target").symlink_to(target, target_is_directory=True)
    (root / "draft").symlink_to(draft, target_is_directory=True)
    (root / "llm_api.yaml").write_text(yaml.safe_dump({"speculative_config": {
        "decoding_type": "Draft_Target", "max_draft_len": draft_len, "speculative_model": "./draft"}}))
    return root


def _post(url: str, payload: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _counters(metrics_url: str, model: str) -> dict[str, float]:
    """``trtspec_*`` counter samples of ``model`` (summed over other labels), names without ``_total``."""
    from prometheus_client.parser import text_string_to_metric_families

    from trtspec.bench.prometheus import scrape

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(scrape(metrics_url)):
        if family.type != "counter" or not family.name.startswith("trtspec_"):
            continue
        for sample in family.samples:
            if sample.labels.get("model") == model and sample.name.endswith("_total"):
                out[family.name] = out.get(family.name, 0.0) + sample.value
    return out


def run_load(server, model: str, payloads: list[dict], concurrency: int) -> dict:
    """Send ``payloads`` to ``model`` from ``concurrency`` threads; latencies, wall time and counter deltas."""
    url = f"http://{server.http_url}/v2/models/{model}/generate"

    def one(p):
        t0 = time.perf_counter()
        _post(url, p)
        return time.perf_counter() - t0

    before = _counters(server.metrics_url, model)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        lat = list(pool.map(one, payloads))
    wall = time.perf_counter() - t0
    after = _counters(server.metrics_url, model)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return {"latencies": lat, "wall_s": wall, "tokens": d.get("trtspec_generation_tokens", 0.0),
            "drafts": d.get("trtspec_spec_decode_num_drafts", 0.0),
            "accepted": d.get("trtspec_spec_decode_num_accepted_tokens", 0.0)}


def summarize(runs: list[dict]) -> dict:
    lat = sorted(x for r in runs for x in r["latencies"])
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
    wall = sum(r["wall_s"] for r in runs)
    drafts = sum(r["drafts"] for r in runs)
    return {"requests": len(lat), "p50_s": q[49], "p90_s": q[89], "p99_s": q[98],
            "requests_per_s": len(lat) / wall, "tokens_per_s": sum(r["tokens"] for r in runs) / wall,
            "mean_al": 1.0 + sum(r["accepted"] for r in runs) / drafts if drafts else 1.0}


def payloads(kind: str, n: int, max_tokens: int, temperature: float, top_p: float) -> list[dict]:
    out = []
    for i in range(n):
        p = {"text_input": PROMPTS[i % len(PROMPTS)], "sampling_param_max_tokens": max_tokens}
        if kind == "sampled":
            p.update(sampling_param_temperature=temperature, sampling_param_top_p=top_p, sampling_param_seed=i)
        out.append(p)
    return out


@click.command()
@click.option("--bundle", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="trtspec bundle to serve [default: the demo pair with --draft-len].")
@click.option("--draft-len", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Draft length of the demo bundle (ignored with --bundle).")
@click.option("--concurrency", type=click.IntRange(1, 256), default=16, show_default=True, help="Client threads.")
@click.option("--requests", "n_requests", type=click.IntRange(1), default=64, show_default=True,
              help="Requests per load and repeat.")
@click.option("--max-tokens", type=click.IntRange(1), default=32, show_default=True, help="New tokens per request.")
@click.option("--temperature", type=click.FloatRange(min=0.0, min_open=True), default=0.8, show_default=True,
              help="Temperature of the sampled load.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.95, show_default=True,
              help="top_p of the sampled load.")
@click.option("--repeats", type=click.IntRange(1), default=2, show_default=True,
              help="Alternating passes over (load, model).")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def main(bundle, draft_len, concurrency, n_requests, max_tokens, temperature, top_p, repeats, as_json):
    """Print p50/p90/p99 latency, requests/s and tokens/s for greedy and sampled loads, with and
    without speculation, and the speculative/base ratios."""
    from dataclasses import replace

    from trtspec.triton.repository import default_settings, write_repository
    from trtspec.triton.server import TritonServer, find_server

    install = find_server()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp = Path(tmp)
        bundle = bundle or demo_bundle(tmp / "demo", draft_len)
        settings = default_settings(bundle)
        if max_tokens > settings.max_tokens_limit:
            raise click.BadParameter(f"{max_tokens} exceeds the bundle's limit {settings.max_tokens_limit}",
                                     param_hint="--max-tokens")
        write_repository(bundle, tmp / "repo", "spec", settings=settings)
        write_repository(bundle, tmp / "repo", "base", settings=replace(settings, draft_len=0))
        with TritonServer(tmp / "repo", install=install, log_path=tmp / "server.log") as server:
            loads = {kind: payloads(kind, n_requests, max_tokens, temperature, top_p) for kind in ("greedy", "sampled")}
            for model in MODELS:   # warm-up: one request of each kind
                for kind in loads:
                    _post(f"http://{server.http_url}/v2/models/{model}/generate", loads[kind][0])
            runs: dict[tuple[str, str], list[dict]] = {(k, m): [] for k in loads for m in MODELS}
            for _ in range(repeats):
                for kind in loads:
                    for model in MODELS:
                        runs[kind, model].append(run_load(server, model, loads[kind], concurrency))
    rows = [{"load": k, "model": m, **summarize(r)} for (k, m), r in runs.items()]
    ratios = {}
    for kind in loads:
        s, b = (next(r for r in rows if r["load"] == kind and r["model"] == m) for m in MODELS)
        ratios[kind] = {"p50": s["p50_s"] / b["p50_s"], "tokens_per_s": s["tokens_per_s"] / b["tokens_per_s"]}
    meta = {"bundle": str(bundle), "concurrency": concurrency, "requests": n_requests * repeats,
            "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
    if as_json:
        click.echo(json.dumps({"meta": meta, "rows": rows, "ratios": ratios}, indent=2))
        return
    click.echo(f"bench_serve: {meta}")
    click.echo(f"{'load':8} {'model':5} {'p50 s':>7} {'p90 s':>7} {'p99 s':>7} {'req/s':>7} {'tok/s':>8} {'AL':>5}")
    for r in rows:
        click.echo(f"{r['load']:8} {r['model']:5} {r['p50_s']:7.3f} {r['p90_s']:7.3f} {r['p99_s']:7.3f} "
                   f"{r['requests_per_s']:7.2f} {r['tokens_per_s']:8.1f} {r['mean_al']:5.2f}")
    for kind, x in ratios.items():
        click.echo(f"{kind}: spec/base tokens/s {x['tokens_per_s']:.2f}x, p50 latency {x['p50']:.2f}x")


if __name__ == "__main__":
    main()
