"""ONNX OpSchemas of trtspec's TensorRT plugins, built from the plugins' interface YAMLs.

Each plugin folder ``plugins/<folder>/<folder>.yaml`` is the single source of truth of its
interface (inputs and outputs with dtypes and symbolic shapes, attributes with types, defaults and
ranges, and the history of its plugin versions). This module loads those files into typed specs and turns each into an
:class:`onnx.defs.OpSchema` in domain ``"trtspec"``, opset version 1, with the attributes TensorRT's
ONNX parser uses to map a node to a plugin: ``plugin_version`` (default the plugin's version) and
``plugin_namespace`` (default ``"trtspec"``), followed by the plugin's own attributes.
``plugins/tools/gen_fields.py`` generates the C++ field headers from the same specs.

Where the YAMLs are looked for, first match wins: ``$TRTSPEC_PLUGIN_SPECS`` (a directory searched
recursively), the installed package ``trtspec.pluginspecs`` (setup.py ships ``plugins/*/*.yaml`` as it),
then the source tree's ``plugins/*/*.yaml``.
"""
from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path

DOMAIN = "trtspec"
OPSET_VERSION = 1

#: YAML dtype name -> ONNX type string.
ONNX_TYPES = {
    "float32": "tensor(float)",
    "float16": "tensor(float16)",
    "bfloat16": "tensor(bfloat16)",
    "int32": "tensor(int32)",
    "int64": "tensor(int64)",
}
#: Attribute types a plugin YAML may declare (all are PluginFieldType::kINT32 scalars in C++).
ATTRIBUTE_TYPES = ("int32",)


@dataclass(frozen=True)
class TensorSpec:
    """One plugin input or output: allowed dtypes (outputs have one), symbolic shape, doc."""

    name: str
    dtypes: tuple[str, ...]
    shape: tuple[str, ...]
    doc: str = ""
    optional: bool = False

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"tensor name {self.name!r}: expected an identifier")
        if not self.dtypes or any(d not in ONNX_TYPES for d in self.dtypes):
            raise ValueError(f"tensor {self.name!r}: dtypes {self.dtypes!r} must be a non-empty subset of {sorted(ONNX_TYPES)}")
        if not self.shape:
            raise ValueError(f"tensor {self.name!r}: shape must have at least one dimension")


@dataclass(frozen=True)
class AttributeSpec:
    """One plugin attribute: a scalar of ``type`` with ``default`` in ``[min, max]``."""

    name: str
    type: str
    default: int
    min: int
    max: int
    doc: str = ""

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"attribute name {self.name!r}: expected an identifier")
        if self.type not in ATTRIBUTE_TYPES:
            raise ValueError(f"attribute {self.name!r}: type {self.type!r} must be one of {ATTRIBUTE_TYPES}")
        if not self.min <= self.default <= self.max:
            raise ValueError(f"attribute {self.name!r}: default {self.default} outside [{self.min}, {self.max}]")
        if self.name in ("plugin_version", "plugin_namespace"):
            raise ValueError(f"attribute {self.name!r} is reserved for TensorRT's ONNX parser")


@dataclass(frozen=True)
class PluginSpec:
    """The interface of one plugin, as read from its YAML (see the module docstring)."""

    name: str
    version: str
    namespace: str
    op: str
    doc: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    attributes: tuple[AttributeSpec, ...]
    path: Path
    versions: tuple[tuple[str, str], ...] = ()
    """(version, change) history, oldest first, ending with ``version``; default: this version only."""

    def __post_init__(self):
        if not self.name.startswith("TrtSpec"):
            raise ValueError(f"{self.path}: plugin name {self.name!r} must start with 'TrtSpec'")
        if not self.version.isdigit():
            raise ValueError(f"{self.path}: version {self.version!r} must be a string of digits")
        if self.namespace != DOMAIN:
            raise ValueError(f"{self.path}: namespace {self.namespace!r}, expected {DOMAIN!r}")
        seen_optional = False
        for t in self.inputs:
            if seen_optional and not t.optional:
                raise ValueError(f"{self.path}: input {t.name!r} follows an optional input; optional inputs must be last")
            seen_optional |= t.optional
        for t in self.outputs:
            if t.optional or len(t.dtypes) != 1:
                raise ValueError(f"{self.path}: output {t.name!r} must be required and have exactly one dtype")
        names = [t.name for t in self.inputs + self.outputs] + [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.path}: duplicate input/output/attribute names in {names}")
        if not self.versions:
            object.__setattr__(self, "versions", ((self.version, "first version"),))
        numbers = [v for v, _ in self.versions]
        if not all(v.isdigit() for v in numbers) or [int(v) for v in numbers] != sorted({int(v) for v in numbers}) \
                or numbers[-1] != self.version:
            raise ValueError(f"{self.path}: versions {numbers} must be increasing digit strings ending with "
                             f"version {self.version!r}")

    @property
    def folder(self) -> str:
        """Plugin folder / file stem: the name with a lower-case first letter (``trtSpecTreeMask``)."""
        return self.name[0].lower() + self.name[1:]

    @property
    def num_required_inputs(self) -> int:
        return sum(not t.optional for t in self.inputs)


def _tensor(d: dict, where: str, output: bool) -> TensorSpec:
    try:
        dtypes = (d["dtype"],) if output else tuple(d["dtypes"])
        return TensorSpec(name=d["name"], dtypes=dtypes, shape=tuple(str(s) for s in d["shape"]),
                          doc=d.get("doc", ""), optional=bool(d.get("optional", False)))
    except KeyError as e:
        raise ValueError(f"{where}: {'output' if output else 'input'} {d!r} lacks key {e}") from None


def load_plugin_spec(path: str | os.PathLike) -> PluginSpec:
    """Reads and validates one plugin YAML; raises ValueError naming the file and the field."""
    import yaml

    path = Path(path)
    with open(path, encoding="utf-8") as f:
        d = yaml.safe_load(f)
    if not isinstance(d, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    missing = {"name", "version", "namespace", "op", "inputs", "outputs", "attributes"} - set(d)
    if missing:
        raise ValueError(f"{path}: missing keys {sorted(missing)}")
    attrs = []
    for a in d["attributes"] or []:
        try:
            attrs.append(AttributeSpec(name=a["name"], type=a["type"], default=int(a["default"]),
                                       min=int(a["min"]), max=int(a["max"]), doc=a.get("doc", "")))
        except KeyError as e:
            raise ValueError(f"{path}: attribute {a!r} lacks key {e}") from None
    versions = []
    for v in d.get("versions") or []:
        if not isinstance(v, dict) or set(v) != {"version", "change"}:
            raise ValueError(f"{path}: each versions entry must have exactly the keys version and change, got {v!r}")
        versions.append((str(v["version"]), " ".join(str(v["change"]).split())))
    return PluginSpec(
        name=str(d["name"]), version=str(d["version"]), namespace=str(d["namespace"]), op=str(d["op"]),
        doc=" ".join(str(d.get("doc", "")).split()),
        inputs=tuple(_tensor(t, str(path), False) for t in d["inputs"]),
        outputs=tuple(_tensor(t, str(path), True) for t in d["outputs"]),
        attributes=tuple(attrs), path=path, versions=tuple(versions),
    )


def plugin_yaml_paths() -> list[Path]:
    """The plugin YAML files, from the first location that has any (see the module docstring)."""
    env = os.environ.get("TRTSPEC_PLUGIN_SPECS")
    here = Path(__file__).resolve().parent
    candidates = []
    if env:
        candidates.append(sorted(Path(env).rglob("trtSpec*.yaml")))
    try:
        packaged = Path(str(importlib.resources.files("trtspec.pluginspecs")))
        candidates.append(sorted(packaged.glob("trtSpec*/trtSpec*.yaml")))
    except (ModuleNotFoundError, TypeError):
        pass
    candidates.append(sorted((here.parent / "plugins").glob("trtSpec*/trtSpec*.yaml")))
    for paths in candidates:
        if paths:
            return paths
    raise FileNotFoundError(
        "no plugin YAMLs found: set TRTSPEC_PLUGIN_SPECS, install trtspec with its data files "
        "(the package trtspec.pluginspecs) or run from a source checkout (plugins/*/*.yaml)")


def load_plugin_specs() -> dict[str, PluginSpec]:
    """All plugin specs by plugin name (``TrtSpecTreeMask``, ...)."""
    specs = [load_plugin_spec(p) for p in plugin_yaml_paths()]
    out = {s.name: s for s in specs}
    if len(out) != len(specs):
        raise ValueError(f"duplicate plugin names in {[str(s.path) for s in specs]}")
    return out


def op_schema(spec: PluginSpec):
    """The :class:`onnx.defs.OpSchema` of one plugin (domain ``trtspec``, since version 1)."""
    from onnx import helper
    from onnx.defs import OpSchema

    constraints = []

    def param(t: TensorSpec):
        if len(t.dtypes) == 1:
            type_str = ONNX_TYPES[t.dtypes[0]]
        else:
            type_str = f"T_{t.name}"
            constraints.append((type_str, [ONNX_TYPES[d] for d in t.dtypes], f"dtypes of {t.name}"))
        option = OpSchema.FormalParameterOption.Optional if t.optional else OpSchema.FormalParameterOption.Single
        doc = f"{t.doc} Shape [{', '.join(t.shape)}]."
        return OpSchema.FormalParameter(t.name, type_str, doc.strip(), param_option=option)

    inputs = [param(t) for t in spec.inputs]
    outputs = [param(t) for t in spec.outputs]
    attributes = [
        OpSchema.Attribute("plugin_version", helper.make_attribute("plugin_version", spec.version),
                           "TensorRT plugin version"),
        OpSchema.Attribute("plugin_namespace", helper.make_attribute("plugin_namespace", spec.namespace),
                           "TensorRT plugin namespace"),
    ]
    for a in spec.attributes:
        attributes.append(OpSchema.Attribute(a.name, helper.make_attribute(a.name, a.default),
                                             f"{a.doc} ({a.type} in [{a.min}, {a.max}], default {a.default})"))
    return OpSchema(spec.name, DOMAIN, OPSET_VERSION, spec.doc, inputs=inputs, outputs=outputs,
                    type_constraints=constraints, attributes=attributes)


def register_schemas() -> list:
    """Registers every plugin's OpSchema with ONNX (idempotent); returns the registered schemas."""
    import onnx.defs

    out = []
    for spec in load_plugin_specs().values():
        if onnx.defs.has(spec.name, OPSET_VERSION, DOMAIN):
            out.append(onnx.defs.get_schema(spec.name, OPSET_VERSION, DOMAIN))
            continue
        schema = op_schema(spec)
        onnx.defs.register_schema(schema)
        out.append(schema)
    return out
