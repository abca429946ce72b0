"""Serving throughput through a real tritonserver with no speculation, static speculation and adaptive
speculation, side by side in one run: greedy and sampled, by concurrency, on a uniform and a mixed
workload.

One server, one repository holding the bundle once per mode: ``none`` (``draft_len: 0``, plain
decoding of the same target), ``static`` (the bundle's speculation: its schedule, or the demo's fixed
``--draft-len``) and ``adaptive`` (``speculation: adaptive``: each step's draft lengths in 0..D
chosen by the runtime's controller from this device's step costs -- measured once before the
server starts, greedy and sampled, unless ``--cost-table`` is given -- and each request's live
acceptance). For every (concurrency, verification, workload) each mode first serves ``--warmup``
untimed loads (the adaptive mode's estimates and step prices settle on the row's workload, as in a
server that has been serving it), then the modes take turns ``--repeats`` times; each load sends
``max(--min-requests, --requests-per-client x concurrency)`` requests from ``concurrency`` client
threads over the HTTP generate endpoint. Tokens/s comes from each model's
``trtspec_generation_tokens_total`` counter over the loads' wall time (``--clock wall``) or over the
CPU seconds its model process spent on them (``--clock cpu``: with ``--threads 1``, what one idle core
would serve, whatever else a shared machine runs; the cost table is then measured on the same
clock); both are kept in ``detail``. ``--control`` serves a second copy of ``none`` beside the others:
its ratio to ``none`` per row is the noise floor of every ratio printed. AL and the mean draft length
come from the model's ``trtspec_spec_decode_*`` counters.

Workloads: ``uniform``: short Python code prompts (one kind of text); ``mixed``: prompts of the
built-in SPEED-Bench sample alternating between high- and low-acceptance categories for the demo
pair (``--high`` / ``--low``; measured on the demo pair, D = 4, 32 new tokens: rag 2.98, coding 2.25,
summarization 2.10 against roleplay 1.24, qa 1.29, math 1.54).

    python benchmarks/bench_serve.py [--bundle DIR] [--speculation none,static,adaptive] [--concurrency 1,4,16]
        [--verify greedy,sample] [--workload uniform,mixed] [--max-tokens 32] [--repeats 3] [--warmup 1]
        [--cost-table FILE] [--threads 0] [--clock wall|cpu] [--control] [--json]

``--json`` prints ``{"rows": [{"concurrency": C, "verify": "greedy"|"sample", "workload":
"uniform"|"mixed", "tokens_per_s": {"none": x, "static": y, "adaptive": z}}, ...], "detail": [...],
"meta": {...}}`` (``meta.cost_table_doc``: the cost table measured for the run; ``detail[i].repeats``:
each repeat's tokens/s per mode and its paired ratios, adaptive / best of the others and control /
none, whose spread shows how far one repeat's ratio wanders). With no --bundle it
serves the demo pair (``trtspec.zoo.demo_paths()``) laid out
as a bundle with a fixed draft length ``--draft-len`` (default 4). Needs a tritonserver
(``trtspec triton install-server``).
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
MODES = ("none", "static", "adaptive")
VERIFY = ("greedy", "sample")
WORKLOADS = ("uniform", "mixed")
#: goals: adaptive >= ROW_GOAL x max(none, static) on every row; >= MIXED_GOAL x on the mixed greedy
#: workload at the highest concurrency
ROW_GOAL, MIXED_GOAL = 0.98, 1.05


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


def model_cpu_s(server, model: str) -> float:
    """CPU seconds (user + system) the server's process for ``model`` (its Python-backend stub) has used."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == server.process.pid and any(a.endswith(f"/{model}/1/model.py".encode()) for a in args):
            return (int(stat[11]) + int(stat[12])) / tick
    raise RuntimeError(f"no model process of {model!r} under tritonserver pid {server.process.pid}")


def run_load(server, model: str, payloads: list[dict], concurrency: int) -> dict:
    """Send ``payloads`` to ``model`` from ``concurrency`` threads; latencies, wall and model-CPU time, and
    counter deltas."""
    url = f"http://{server.http_url}/v2/models/{model}/generate"

    def one(p):
        t0 = time.perf_counter()
        _post(url, p)
        return time.perf_counter() - t0

    before, cpu0 = _counters(server.metrics_url, model), model_cpu_s(server, model)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        lat = list(pool.map(one, payloads))
    wall = time.perf_counter() - t0
    after, cpu = _counters(server.metrics_url, model), model_cpu_s(server, model) - cpu0
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    return {"latencies": lat, "wall_s": wall, "cpu_s": cpu, "tokens": d.get("trtspec_generation_tokens", 0.0),
            "steps": d.get("trtspec_spec_decode_num_steps", 0.0),
            "drafts": d.get("trtspec_spec_decode_num_drafts", 0.0),
            "draft_tokens": d.get("trtspec_spec_decode_num_draft_tokens", 0.0),
            "accepted": d.get("trtspec_spec_decode_num_accepted_tokens", 0.0)}


def summarize(runs: list[dict], clock: str) -> dict:
    lat = sorted(x for r in runs for x in r["latencies"])
    wall, cpu, tokens = sum(r["wall_s"] for r in runs), sum(r["cpu_s"] for r in runs), sum(r["tokens"] for r in runs)
    steps, drafts = sum(r["steps"] for r in runs), sum(r["drafts"] for r in runs)
    rates = {"wall": tokens / wall, "cpu": tokens / cpu if cpu > 0 else 0.0}
    return {"requests": len(lat), "p50_s": statistics.median(lat), "tokens_per_s": rates[clock],
            "wall_tokens_per_s": rates["wall"], "cpu_tokens_per_s": rates["cpu"],
            "mean_al": 1.0 + sum(r["accepted"] for r in runs) / drafts if drafts else 1.0,
            "mean_draft_len": sum(r["draft_tokens"] for r in runs) / steps if steps else 0.0}


def paired(rates: dict[str, float], others: list[str], mode: str) -> float | None:
    """``mode``'s tokens/s over the best of ``others`` (itself left out): over a row's loads, or in one
    repeat, where the modes served the same load back to back; None when either side is missing."""
    rest = [rates[m] for m in others if m != mode and m in rates]
    return rates[mode] / max(rest) if mode in rates and rest and max(rest) > 0 else None


def workload_prompts(workload: str, high: list[str], low: list[str]) -> list[str]:
    """``uniform``: the code prompts; ``mixed``: first turns of the built-in sample, one high- then one
    low-acceptance category prompt in turn."""
    if workload == "uniform":
        return list(PROMPTS)
    from trtspec.bench.datasets import load_prompts

    by_cat: dict[str, list[str]] = {}
    for p in load_prompts("builtin", categories=high + low, code_prompts=0):
        by_cat.setdefault(p.category, []).append(p.turns[0])
    missing = [c for c in high + low if c not in by_cat]
    if missing:
        raise click.BadParameter(f"categories {missing} are not in the built-in sample", param_hint="--high/--low")
    highs = [t for i in range(max(len(v) for v in by_cat.values())) for c in high if i < len(by_cat[c])
             for t in [by_cat[c][i]]]
    lows = [t for i in range(max(len(v) for v in by_cat.values())) for c in low if i < len(by_cat[c])
            for t in [by_cat[c][i]]]
    return [t for pair in zip(highs, lows) for t in pair]


def payloads(prompts: list[str], verify: str, n: int, max_tokens: int, temperature: float, top_p: float) -> list[dict]:
    out = []
    for i in range(n):
        p = {"text_input": prompts[i % len(prompts)], "sampling_param_max_tokens": max_tokens}
        if verify == "sample":
            p.update(sampling_param_temperature=temperature, sampling_param_top_p=top_p, sampling_param_seed=i)
        out.append(p)
    return out


def measure_cost_table(bundle: Path, out: Path, max_depth: int, clock: str) -> Path:
    """This device's step costs of the bundle's pair (greedy and sampled), for the adaptive model: 15 timed
    steps per cell (the median), since the controller takes the shape over depths from the table."""
    from trtspec.bench.adaptive import measure_costs
    from trtspec.runtime import load_pipeline
    from trtspec.triton.bundle import read_bundle

    b = read_bundle(bundle)
    pipe = load_pipeline(str(b.target), None if b.draft is None else str(b.draft), drafter=b.drafter,
                         draft_len=max_depth)
    out.write_text(json.dumps(measure_costs(pipe, max_depth, repeats=15, clock=clock), indent=2))
    return out


def _csv(text: str, allowed, name: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if not items or bad:
        raise click.BadParameter(f"expected a comma-separated subset of {', '.join(allowed)}, got {text!r}",
                                 param_hint=name)
    return [x for x in allowed if x in items]


@click.command()
@click.option("--bundle", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="trtspec bundle to serve [default: the demo pair with --draft-len].")
@click.option("--draft-len", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Draft length of the demo bundle (ignored with --bundle): static's D and adaptive's cap.")
@click.option("--speculation", "modes", default=",".join(MODES), show_default=True,
              help="Modes served side by side: none, static, adaptive.")
@click.option("--concurrency", default="1,4,16", show_default=True, help="Client threads, e.g. '1,4,16'.")
@click.option("--verify", "verifies", default=",".join(VERIFY), show_default=True,
              help="greedy and/or sample (temperature --temperature, top-p --top-p, one seed per request).")
@click.option("--workload", "workloads", default=",".join(WORKLOADS), show_default=True,
              help="uniform (code prompts) and/or mixed (high- and low-acceptance categories in turn).")
@click.option("--high", default="rag,coding,summarization", show_default=True,
              help="mixed workload: high-acceptance categories of the built-in sample.")
@click.option("--low", default="roleplay,qa,math", show_default=True,
              help="mixed workload: low-acceptance categories of the built-in sample.")
@click.option("--requests-per-client", type=click.IntRange(1), default=4, show_default=True,
              help="Requests per load = max(--min-requests, this x concurrency).")
@click.option("--min-requests", type=click.IntRange(1), default=12, show_default=True, help="See --requests-per-client.")
@click.option("--max-tokens", type=click.IntRange(1), default=32, show_default=True, help="New tokens per request.")
@click.option("--temperature", type=click.FloatRange(min=0.0, min_open=True), default=0.8, show_default=True,
              help="Temperature of the sampled loads.")
@click.option("--top-p", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.95, show_default=True,
              help="top_p of the sampled loads.")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
              help="Passes over the modes per row (they take turns).")
@click.option("--warmup", type=click.IntRange(0), default=1, show_default=True,
              help="Untimed loads of each mode before each row's timed ones: caches, and the adaptive mode's "
                   "acceptance estimates and step prices, settle on the row's workload as in a server that has "
                   "been serving it.")
@click.option("--cost-table", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Step costs of the adaptive model [default: measured on this device before the server starts].")
@click.option("--threads", type=click.IntRange(0), default=0, show_default=True,
              help="torch threads of the server's models and of the cost measurement (OMP_NUM_THREADS); 0 = "
                   "torch's default. 1 keeps a busy shared CPU machine from stalling multi-threaded steps.")
@click.option("--clock", type=click.Choice(["wall", "cpu"]), default="wall", show_default=True,
              help="tokens/s over the loads' wall time, or over the CPU time of each model's process (use with "
                   "--threads 1 on a busy shared machine; the cost table is measured on the same clock).")
@click.option("--control", is_flag=True,
              help="Also serve a second copy of 'none' (model 'control') taking its turn like the others: its "
                   "ratio to 'none' on every row is this machine's noise floor for the ratios printed.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def main(bundle, draft_len, modes, concurrency, verifies, workloads, high, low, requests_per_client, min_requests,
         max_tokens, temperature, top_p, repeats, warmup, cost_table, threads, clock, control, as_json):
    """Print tokens/s of no, static and adaptive speculation per (concurrency, verification,
    workload), the adaptive mode's ratio to the best of the other two, and the goals."""
    from dataclasses import replace

    from trtspec.bench.config import parse_int_list
    from trtspec.triton.bundle import read_bundle
    from trtspec.triton.repository import default_settings, write_repository
    from trtspec.triton.server import TritonServer, find_server

    modes = _csv(modes, MODES, "--speculation")
    if control and "none" not in modes:
        raise click.BadParameter("--control is a second copy of 'none': add none to --speculation",
                                 param_hint="--control")
    served = modes + ["control"] * control
    verifies = _csv(verifies, VERIFY, "--verify")
    workloads = _csv(workloads, WORKLOADS, "--workload")
    try:
        levels = parse_int_list(concurrency, "--concurrency")
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--concurrency") from None
    if clock == "cpu" and threads != 1:
        raise click.BadParameter("--clock cpu counts one thread's work: it needs --threads 1", param_hint="--clock")
    texts = {w: workload_prompts(w, high.split(","), low.split(",")) for w in workloads}
    if threads:
        import os

        import torch

        os.environ["OMP_NUM_THREADS"] = str(threads)   # inherited by tritonserver and its model stubs
        torch.set_num_threads(threads)
    install = find_server()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp = Path(tmp)
        bundle = bundle or demo_bundle(tmp / "demo", draft_len)
        settings = default_settings(bundle)
        if max_tokens > settings.max_tokens_limit:
            raise click.BadParameter(f"{max_tokens} exceeds the bundle's limit {settings.max_tokens_limit}",
                                     param_hint="--max-tokens")
        max_depth = max([read_bundle(bundle).draft_len, *(read_bundle(bundle).draft_len_schedule or {}).values()])
        cost_s, measured = 0.0, None
        if "adaptive" in modes and cost_table is None:
            t0 = time.perf_counter()
            cost_table = measure_cost_table(bundle, tmp / "cost_table.json", max_depth, clock)
            cost_s = time.perf_counter() - t0
            measured = json.loads(cost_table.read_text())
        plain = replace(settings, draft_len=0)
        per_mode = {"none": plain, "control": plain, "static": settings,
                    "adaptive": replace(settings, speculation="adaptive", cost_table=cost_table)}
        for mode in served:
            write_repository(bundle, tmp / "repo", mode, settings=per_mode[mode])
        runs: dict[tuple, list[dict]] = {}
        with TritonServer(tmp / "repo", install=install, log_path=tmp / "server.log") as server:
            for mode in served:   # warm-up: one request of each verification
                for v in verifies:
                    _post(f"http://{server.http_url}/v2/models/{mode}/generate",
                          payloads(PROMPTS, v, 1, max_tokens, temperature, top_p)[0])
            for c in levels:
                n = max(min_requests, requests_per_client * c)
                for v in verifies:
                    for w in workloads:
                        load = payloads(texts[w], v, n, max_tokens, temperature, top_p)
                        for _ in range(warmup):   # untimed: every mode settles on this row's load first
                            for mode in served:
                                run_load(server, mode, load, c)
                        for r in range(repeats):
                            for mode in served[r % len(served):] + served[:r % len(served)]:   # rotate who goes first
                                runs.setdefault((c, v, w, mode), []).append(run_load(server, mode, load, c))
    rows, detail = [], []
    for c in levels:
        for v in verifies:
            for w in workloads:
                s = {m: summarize(runs[c, v, w, m], clock) for m in served}
                rows.append({"concurrency": c, "verify": v, "workload": w,
                             "tokens_per_s": {m: s[m]["tokens_per_s"] for m in modes}})
                pooled = {m: s[m]["tokens_per_s"] for m in served}
                ratio, floor = paired(pooled, modes, "adaptive"), paired(pooled, ["none"], "control")
                per = [{m: summarize([runs[c, v, w, m][r]], clock)["tokens_per_s"] for m in served}
                       for r in range(repeats)]
                detail.append({"concurrency": c, "verify": v, "workload": w, "adaptive_ratio": ratio,
                               "control_over_none": floor,
                               "repeats": {"tokens_per_s": per,
                                           "adaptive_ratio": [paired(x, modes, "adaptive") for x in per],
                                           "control_over_none": [paired(x, ["none"], "control") for x in per]},
                               **{m: {k: s[m][k] for k in ("p50_s", "mean_al", "mean_draft_len", "requests",
                                                           "wall_tokens_per_s", "cpu_tokens_per_s")}
                                  for m in served}})
    meta = {"bundle": str(bundle), "modes": modes, "control": control, "max_tokens": max_tokens,
            "temperature": temperature, "top_p": top_p, "threads": threads or "default", "clock": clock,
            "repeats": repeats, "warmup": warmup,
            "cost_table": "measured before the server started" if cost_s else str(cost_table),
            "cost_table_s": cost_s, "wall_s": time.perf_counter() - t_start,
            "cost_table_doc": measured}
    if as_json:
        click.echo(json.dumps({"rows": rows, "detail": detail, "meta": meta}, indent=2))
        return
    _print(rows, detail, meta, modes)


def _print(rows, detail, meta, modes) -> None:
    click.echo(f"bench_serve: { {k: v for k, v in meta.items() if k != 'cost_table_doc'} }")
    head = f"{'conc':>4} {'verify':6} {'workload':8} | " + " ".join(f"{m + ' tok/s':>15}" for m in modes)
    head += " | adaptive/best | mean D (AL) " + " ".join(f"{m:>11}" for m in modes)
    head += " | control/none" if meta.get("control") else ""
    head += " | adaptive/best per repeat"
    click.echo(head)
    misses = []
    for row, d in zip(rows, detail):
        r = d["adaptive_ratio"]
        cells = " ".join(f"{row['tokens_per_s'][m]:15.1f}" for m in modes)
        dl = " ".join(f"{d[m]['mean_draft_len']:5.2f}({d[m]['mean_al']:4.2f})" for m in modes)
        floor = d.get("control_over_none")
        each = [x for x in d["repeats"]["adaptive_ratio"] if x is not None]
        spread = f"{min(each):.3f}..{max(each):.3f}" if each else "n/a"
        click.echo(f"{row['concurrency']:>4} {row['verify']:6} {row['workload']:8} | {cells} | "
                   f"{'n/a' if r is None else f'{r:13.3f}'} | {dl}" + ("" if floor is None else f" | {floor:12.3f}")
                   + f" | {spread}")
        if r is not None and r < ROW_GOAL:
            misses.append(f"c={row['concurrency']} {row['verify']} {row['workload']}: {r:.3f} < {ROW_GOAL}")
    if "adaptive" in modes and len(modes) > 1:
        top = max(d["concurrency"] for d in detail)
        mixed = [d for d in detail if d["concurrency"] == top and d["verify"] == "greedy" and d["workload"] == "mixed"]
        for d in mixed:
            ok = d["adaptive_ratio"] >= MIXED_GOAL
            click.echo(f"mixed greedy c={top}: adaptive {d['adaptive_ratio']:.3f}x the best of the others "
                       f"({'meets' if ok else 'misses'} {MIXED_GOAL})")
        click.echo("every row adaptive >= 0.98 x max(others): " + ("yes" if not misses else "no: " + "; ".join(misses)))
    floors = [abs(d["control_over_none"] - 1.0) for d in detail if d.get("control_over_none") is not None]
    if floors:
        click.echo(f"noise floor (the same settings served twice, control/none): median |1 - ratio| "
                   f"{sorted(floors)[len(floors) // 2]:.3f}, worst {max(floors):.3f}")


if __name__ == "__main__":
    main()
