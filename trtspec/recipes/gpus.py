"""GPU catalog: ``recipes/gpus/<name>.yaml`` loaded into a frozen, validated ``GPU``.

Every figure in a GPU file is ``{value: x, source: "..."}`` (datasheet figures) or ``{value: x, justification: "..."}``
(attainable-efficiency factors and fixed overheads); a figure without a source is rejected. An optional
``perf_db: {system: NAME, source: "..."}`` names the aiconfigurator-core system whose measured kernel tables price
this GPU's steps (``trtspec.recipes.perfdb``); without it every op class is priced by the roofline.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trtspec.recipes.errors import CatalogError, UnknownGPUError
from trtspec.recipes.paths import book_dir, read_named_mapping

DTYPES = ("bf16", "fp8", "fp4")


@dataclass(frozen=True)
class GPU:
    """One accelerator (per-GPU figures; a TP group multiplies nothing here, the cost model does).

    Units: ``memory_bytes`` B, ``bandwidth`` B/s (peak), ``flops[dtype]`` FLOP/s dense peak, ``link_bandwidth`` B/s
    unidirectional per GPU, overheads in seconds, tile sizes in rows. ``eff_*`` are attainable fractions (0, 1].
    """

    name: str
    display_name: str
    memory_bytes: float
    bandwidth: float
    flops: dict
    link_kind: str
    link_bandwidth: float
    eff_bandwidth: float = 0.8
    eff_compute: float = 0.7
    eff_link: float = 0.7
    allreduce_latency: float = 6e-6
    layer_overhead: float = 5e-6
    step_overhead: float = 170e-6
    spec_overhead: float = 40e-6
    kernel_floor: float = 0.0
    attention_tile_rows: int = 128
    gemm_tile_m: int = 128
    requires_calibration: bool = False
    perf_db_system: str | None = None
    sources: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if self.requires_calibration:
            return
        for attr in ("memory_bytes", "bandwidth", "link_bandwidth"):
            if not getattr(self, attr) >= 0 or (attr != "link_bandwidth" and getattr(self, attr) == 0):
                raise CatalogError(f"gpu {self.name!r}: {attr} must be > 0, got {getattr(self, attr)!r}")
        if "bf16" not in self.flops:
            raise CatalogError(f"gpu {self.name!r}: tflops.bf16 is required")
        for k, v in self.flops.items():
            if k not in DTYPES or not v > 0:
                raise CatalogError(f"gpu {self.name!r}: tflops.{k} must be one of {DTYPES} with a value > 0, got {v!r}")
        for attr in ("eff_bandwidth", "eff_compute", "eff_link"):
            if not 0 < getattr(self, attr) <= 1:
                raise CatalogError(f"gpu {self.name!r}: efficiency {attr} must be in (0, 1], got {getattr(self, attr)}")
        for attr in ("allreduce_latency", "layer_overhead", "step_overhead", "spec_overhead", "kernel_floor"):
            if getattr(self, attr) < 0:
                raise CatalogError(f"gpu {self.name!r}: {attr} must be >= 0")
        if self.attention_tile_rows < 1 or self.gemm_tile_m < 1:
            raise CatalogError(f"gpu {self.name!r}: tile sizes must be >= 1")

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype`` (bf16 | fp8 | fp4); raises when the GPU has no such tensor cores."""
        if dtype not in self.flops:
            raise CatalogError(
                f"gpu {self.name!r} has no {dtype} tensor cores (it has {sorted(self.flops)}); choose another --quant"
            )
        return self.flops[dtype]


def _figure(doc: dict, key: str, path: Path, *, need: str = "source"):
    entry = doc.get(key)
    if not isinstance(entry, dict) or "value" not in entry:
        raise CatalogError(f"{path}: '{key}' must be a mapping {{value: ..., {need}: ...}}")
    if not str(entry.get(need) or "").strip():
        raise CatalogError(f"{path}: '{key}' has no {need}; every figure needs one")
    return entry["value"], str(entry[need])


def load_gpu_file(path: str | Path) -> GPU:
    """Parse and validate one GPU YAML file (see ``recipes/gpus/h200.yaml`` for the layout)."""
    path = Path(path)
    doc = read_named_mapping(path, "GPU file")
    name = str(doc["name"])
    sources = {}
    mem, sources["memory_gb"] = _figure(doc, "memory_gb", path)
    bw, sources["hbm_bandwidth_tbs"] = _figure(doc, "hbm_bandwidth_tbs", path)
    link = doc.get("interconnect") or {}
    if not str(link.get("source") or "").strip():
        raise CatalogError(f"{path}: 'interconnect' has no source")
    sources["interconnect"] = link["source"]
    if doc.get("requires_calibration"):
        return GPU(name=name, display_name=str(doc.get("display_name", name)), memory_bytes=0.0, bandwidth=0.0,
                   flops={}, link_kind=str(link.get("kind", "none")), link_bandwidth=0.0,
                   requires_calibration=True, sources=sources)
    flops = {}
    for dtype, entry in (doc.get("tflops") or {}).items():
        value, sources[f"tflops.{dtype}"] = _figure(doc["tflops"], dtype, path)
        flops[dtype] = float(value) * 1e12
    perf_db = doc.get("perf_db")
    if perf_db is not None:
        if not isinstance(perf_db, dict) or not str(perf_db.get("system") or "").strip():
            raise CatalogError(f"{path}: 'perf_db' must be a mapping {{system: NAME, source: ...}}")
        _, sources["perf_db"] = _figure({"perf_db": {"value": perf_db["system"], **perf_db}}, "perf_db", path)
    eff = doc.get("efficiency") or {}
    ovh = doc.get("overheads") or {}
    kwargs = {}
    for key, attr in (("bandwidth", "eff_bandwidth"), ("compute", "eff_compute"), ("interconnect", "eff_link")):
        value, sources[f"efficiency.{key}"] = _figure(eff, key, path, need="justification")
        kwargs[attr] = float(value)
    for key, attr, scale in (("allreduce_latency_us", "allreduce_latency", 1e-6), ("layer_overhead_us", "layer_overhead", 1e-6),
                             ("step_overhead_us", "step_overhead", 1e-6), ("spec_overhead_us", "spec_overhead", 1e-6),
                             ("kernel_floor_us", "kernel_floor", 1e-6),
                             ("attention_tile_rows", "attention_tile_rows", None), ("gemm_tile_m", "gemm_tile_m", None)):
        value, sources[f"overheads.{key}"] = _figure(ovh, key, path, need="justification")
        kwargs[attr] = float(value) * scale if scale else int(value)
    try:
        return GPU(
            name=name, display_name=str(doc.get("display_name", name)), memory_bytes=float(mem) * 1e9,
            bandwidth=float(bw) * 1e12, flops=flops, link_kind=str(link.get("kind", "none")),
            link_bandwidth=float(link.get("gbs", 0)) * 1e9 / 2.0, sources=sources,
            perf_db_system=str(perf_db["system"]) if perf_db else None, **kwargs,
        )
    except TypeError as exc:
        raise CatalogError(f"{path}: bad figure type: {exc}") from exc


@functools.lru_cache(maxsize=None)
def _gpu_files() -> dict:
    files = {}
    for path in sorted((book_dir() / "gpus").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for alias in [doc.get("name", path.stem)] + list(doc.get("aliases") or []):
            files[str(alias).lower()] = path
    return files


def gpu_names() -> list[str]:
    """Canonical names of the catalog's GPUs (file stems), sorted."""
    return sorted({p.stem for p in _gpu_files().values()})


def load_gpu(name: str) -> GPU:
    """The catalog GPU called ``name`` (case-insensitive; aliases allowed). Unknown names list the known ones."""
    if isinstance(name, GPU):
        return name
    key = str(name).strip().lower()
    path = _gpu_files().get(key)
    if path is None:
        raise UnknownGPUError(f"unknown GPU {name!r}; known GPUs: {', '.join(gpu_names())}")
    return load_gpu_file(path)
