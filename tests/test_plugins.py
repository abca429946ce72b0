"""TensorRT plugins: the YAML interfaces, the generated C++ fields, the ONNX OpSchemas and the
CMake gate agree; the plugin sources compile against the public TensorRT headers where present."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
TRT_HEADERS = Path(os.environ.get("TRTSPEC_TRT_HEADERS", "/tmp/trt-headers/include"))
VERSIONS = {"TrtSpecTreeMask": "1", "TrtSpecVerifyGreedy": "1", "TrtSpecVerifySample": "2", "TrtSpecVerifyBlock": "2"}
EXPECTED = set(VERSIONS)


def _gen_fields():
    sys.path.insert(0, str(PLUGINS / "tools"))
    try:
        import gen_fields
    finally:
        sys.path.pop(0)
    return gen_fields


@pytest.fixture(scope="module")
def specs():
    from trtspec.onnx_schemas import load_plugin_specs

    return load_plugin_specs()


def _parse_fields_header(text: str) -> dict:
    """Reads the C++ constants back out of a generated Fields header."""
    def scalar(name):
        return re.search(rf"{name} = \"?([^\";]*)\"?;", text).group(1)

    def io(kind):
        body = re.search(rf"kInputs\[\d+\] = \{{(.*?)\}};" if kind == "in" else r"kOutputs\[\d+\] = \{(.*?)\};", text).group(1)
        return re.findall(r'IoSpec\{"(\w+)", ([\w |]+)\}', body)

    attrs = re.findall(r'AttributeSpec\{"(\w+)", (-?\d+), (-?\d+), (-?\d+)\}', text)
    return {
        "name": scalar("kName"), "version": scalar("kVersion"), "namespace": scalar("kNamespace"),
        "nb_required": int(scalar("kNbRequiredInputs")), "nb_attributes": int(scalar("kNbAttributes")),
        "inputs": io("in"), "outputs": io("out"),
        "attributes": [(n, int(d), int(lo), int(hi)) for n, d, lo, hi in attrs],
    }


def test_every_plugin_has_a_yaml_in_its_oss_style_folder(specs):
    assert set(specs) == EXPECTED
    for spec in specs.values():
        folder = PLUGINS / spec.folder
        assert spec.path.resolve() == (folder / f"{spec.folder}.yaml").resolve()
        assert (spec.version, spec.namespace) == (VERSIONS[spec.name], "trtspec")
        assert [v for v, _ in spec.versions] == [str(i) for i in range(1, int(spec.version) + 1)]
        for f in (f"{spec.folder}Plugin.h", f"{spec.folder}Plugin.cpp", f"{spec.folder}Fields.h", "README.md"):
            assert (folder / f).is_file(), f"missing {folder / f}"


def test_generated_headers_and_readmes_are_up_to_date():
    for yml, path, text in _gen_fields().targets():
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run python plugins/tools/gen_fields.py"


def test_cpp_fields_agree_with_yaml(specs):
    bits = {"float32": "kIoFloat32", "float16": "kIoFloat16", "bfloat16": "kIoBFloat16", "int32": "kIoInt32",
            "int64": "kIoInt64"}
    for spec in specs.values():
        cpp = _parse_fields_header((PLUGINS / spec.folder / f"{spec.folder}Fields.h").read_text())
        assert (cpp["name"], cpp["version"], cpp["namespace"]) == (spec.name, spec.version, spec.namespace)
        assert cpp["nb_required"] == spec.num_required_inputs
        assert [(n, set(b.split(" | "))) for n, b in cpp["inputs"]] == [
            (t.name, {bits[d] for d in t.dtypes}) for t in spec.inputs]
        assert [(n, b) for n, b in cpp["outputs"]] == [(t.name, bits[t.dtypes[0]]) for t in spec.outputs]
        assert cpp["nb_attributes"] == len(spec.attributes)
        assert cpp["attributes"] == [(a.name, a.default, a.min, a.max) for a in spec.attributes]


def test_onnx_schemas_agree_with_yaml(specs):
    import onnx.defs
    from onnx.defs import OpSchema

    from trtspec.onnx_schemas import DOMAIN, register_schemas

    registered = {s.name for s in register_schemas()}
    assert registered == EXPECTED
    assert {s.name for s in register_schemas()} == EXPECTED  # idempotent
    for spec in specs.values():
        schema = onnx.defs.get_schema(spec.name, 1, DOMAIN)
        assert [p.name for p in schema.inputs] == [t.name for t in spec.inputs]
        assert [p.option == OpSchema.FormalParameterOption.Optional for p in schema.inputs] == [
            t.optional for t in spec.inputs]
        assert [p.name for p in schema.outputs] == [t.name for t in spec.outputs]
        attrs = schema.attributes
        assert set(attrs) == {"plugin_version", "plugin_namespace"} | {a.name for a in spec.attributes}
        assert attrs["plugin_version"].default_value.s.decode() == spec.version
        assert attrs["plugin_namespace"].default_value.s.decode() == "trtspec"
        for a in spec.attributes:
            assert attrs[a.name].default_value.i == a.default


def test_the_sampled_plugins_share_one_layout(specs):
    """TrtSpecVerifySample = TrtSpecVerifyBlock's inputs (names, dtypes, shapes, order) plus parents,
    as trtspec.ops.verify_sample / verify_block take the same tensors."""
    sample, block = specs["TrtSpecVerifySample"], specs["TrtSpecVerifyBlock"]
    rows = lambda ts: [(t.name, t.dtypes, t.shape, t.optional) for t in ts]  # noqa: E731
    assert rows(t for t in sample.inputs if t.name != "parents") == rows(block.inputs)
    assert [t.name for t in block.inputs] == ["draft_tokens", "target_probs", "draft_probs", "seed", "offset",
                                              "draft_lens"]
    assert {t.name: t.shape for t in block.inputs} == {
        "draft_tokens": ("B", "D"), "target_probs": ("B", "D+1", "V"), "draft_probs": ("B", "D", "V"),
        "seed": ("B",), "offset": ("B",), "draft_lens": ("B",)}
    assert block.inputs[0].dtypes == ("int32", "int64")
    import inspect

    from trtspec import ops
    params = lambda f: list(inspect.signature(f).parameters)  # noqa: E731
    assert [p for p in params(ops.verify_block) if p != "validate"] == [t.name for t in block.inputs]
    assert [p for p in params(ops.verify_sample) if p in {t.name for t in sample.inputs}] == [
        t.name for t in sample.inputs]


def test_plugin_sources_take_every_name_from_the_generated_fields(specs):
    """No interface name is spelled by hand in the plugin C++: renaming one in the YAML cannot drift."""
    for spec in specs.values():
        names = {t.name for t in spec.inputs + spec.outputs} | {a.name for a in spec.attributes} | {spec.name}
        for src in (PLUGINS / spec.folder).glob(f"{spec.folder}Plugin.*"):
            literals = set(re.findall(r'"([^"\\]*)"', src.read_text()))
            assert not literals & names, f"{src} spells {literals & names}; use {spec.name}Fields"


def test_registration_registers_exactly_the_yaml_plugins(specs):
    text = (PLUGINS / "registration.cpp").read_text()
    assert set(re.findall(r"REGISTER_TENSORRT_PLUGIN\((\w+)Creator\)", text)) == set(specs)


def test_onnx_checker_accepts_a_plugin_node():
    import onnx
    from onnx import TensorProto, helper

    from trtspec.onnx_schemas import register_schemas

    register_schemas()
    node = helper.make_node("TrtSpecVerifyGreedy", ["tokens", "parents", "logits"],
                            ["accepted_len", "accepted_nodes", "bonus_token"], domain="trtspec",
                            plugin_version="1", plugin_namespace="trtspec", max_depth=3)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["B", 5]),
         helper.make_tensor_value_info("parents", TensorProto.INT32, ["B", 5]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT16, ["B", 5, 111])],
        [helper.make_tensor_value_info("accepted_len", TensorProto.INT32, ["B"]),
         helper.make_tensor_value_info("accepted_nodes", TensorProto.INT32, ["B", 4]),
         helper.make_tensor_value_info("bonus_token", TensorProto.INT64, ["B"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("trtspec", 1)])
    onnx.checker.check_model(model, full_check=True)

    bad = helper.make_node("TrtSpecVerifyGreedy", ["tokens", "parents", "logits"],
                           ["accepted_len", "accepted_nodes", "bonus_token"], domain="trtspec", max_dept=3)
    model.graph.node[0].CopyFrom(bad)
    with pytest.raises(onnx.checker.ValidationError, match="max_dept"):
        onnx.checker.check_model(model)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace("default: -1", "default: -2"), "default -2 outside"),
    (lambda t: t, None),  # control: the file as shipped loads
    (lambda t: t.replace("namespace: trtspec", "namespace: other"), "namespace 'other'"),
    (lambda t: t.replace("dtypes: [float32, float16, bfloat16]", "dtypes: [float64]"), "dtypes"),
])
def test_bad_yaml_is_rejected_with_the_field_named(tmp_path, edit, message):
    from trtspec.onnx_schemas import load_plugin_spec

    src = (PLUGINS / "trtSpecVerifyGreedy" / "trtSpecVerifyGreedy.yaml").read_text()
    path = tmp_path / "trtSpecVerifyGreedy.yaml"
    path.write_text(edit(src))
    if message is None:  # the unedited file loads
        assert load_plugin_spec(path).name == "TrtSpecVerifyGreedy"
        return
    with pytest.raises(ValueError, match=message):
        load_plugin_spec(path)


@pytest.mark.parametrize("versions, message", [
    ('versions:\n  - {version: "2", change: x}\n', r"versions \['2'\] must be increasing"),
    ('versions:\n  - {version: "1", change: x}\n  - {version: "1", change: y}\n', r"must be increasing"),
    ('versions:\n  - {version: "1"}\n', r"exactly the keys version and change"),
])
def test_bad_version_history_is_rejected(tmp_path, versions, message):
    from trtspec.onnx_schemas import load_plugin_spec

    src = (PLUGINS / "trtSpecTreeMask" / "trtSpecTreeMask.yaml").read_text()
    path = tmp_path / "trtSpecTreeMask.yaml"
    path.write_text(src.replace("inputs:", versions + "inputs:", 1))
    with pytest.raises(ValueError, match=message):
        load_plugin_spec(path)


def test_optional_input_must_be_last(tmp_path):
    from trtspec.onnx_schemas import load_plugin_spec

    src = (PLUGINS / "trtSpecTreeMask" / "trtSpecTreeMask.yaml").read_text()
    src = src.replace("attributes: []", "").replace("outputs:", "  - name: extra\n    dtypes: [int32]\n"
                                                     "    shape: [B]\noutputs:", 1) + "attributes: []\n"
    path = tmp_path / "trtSpecTreeMask.yaml"
    path.write_text(src)
    with pytest.raises(ValueError, match="'extra' follows an optional input"):
        load_plugin_spec(path)


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_configure_without_tensorrt_reports_it_and_succeeds(tmp_path):
    env = dict(os.environ)
    env.pop("TENSORRT_ROOT", None)
    proc = subprocess.run(["cmake", "-S", str(PLUGINS), "-B", str(tmp_path / "b"), f"-DTENSORRT_ROOT={tmp_path}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "TensorRT not found" in proc.stderr + proc.stdout
    assert "libtrtspec_plugins.so is not built" in " ".join((proc.stderr + proc.stdout).split())
    assert not list((tmp_path / "b").rglob("libtrtspec_plugins.so"))


def _header_sets() -> list[Path]:
    """Every public TensorRT include/ directory under $TRTSPEC_TRT_HEADERS' parent (e.g. the
    default /tmp/trt-headers/include plus /tmp/trt-headers/<tag>/include), or none."""
    root = TRT_HEADERS.parent
    found = {TRT_HEADERS} if (TRT_HEADERS / "NvInfer.h").is_file() else set()
    if root.is_dir():
        found |= {p.parent for p in root.glob("*/include/NvInfer.h")}
    return sorted(found)


def _compile_command(src: Path, headers: Path) -> list[str]:
    """The check documented in plugins/README.md (g++ -fsyntax-only against the public headers)."""
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    return ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
            "-isystem", str(headers), "-isystem", str(cuda_include),
            "-I", str(ROOT / "cpp" / "include"), "-I", str(ROOT / "cpp" / "src"), "-I", str(PLUGINS), str(src)]


@pytest.mark.tensorrt
@pytest.mark.skipif(not _header_sets(),
                    reason=f"public TensorRT headers not found in {TRT_HEADERS} (set TRTSPEC_TRT_HEADERS)")
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("headers", _header_sets(), ids=lambda p: str(p.parent.name))
def test_plugin_sources_compile_against_public_tensorrt_headers(headers):
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    if not (cuda_include / "cuda_runtime_api.h").is_file():
        pytest.skip(f"CUDA headers not found in {cuda_include}")
    for src in sorted(PLUGINS.rglob("*.cpp")):
        proc = subprocess.run(_compile_command(src, headers), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{src} against {headers}:\n{proc.stderr[-4000:]}"


@pytest.mark.tensorrt
@pytest.mark.skipif(not _header_sets(),
                    reason=f"public TensorRT headers not found in {TRT_HEADERS} (set TRTSPEC_TRT_HEADERS)")
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
@pytest.mark.parametrize("headers", _header_sets(), ids=lambda p: str(p.parent.name))
def test_plugin_plumbing_host_test_passes(headers, tmp_path):
    """plugins/tests/pluginHostTest.cpp: creators, serialization, dtypes, shapes, shape-check
    messages, workspace and the arguments enqueue hands to the launchers (stubbed; no GPU)."""
    cuda_include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    if not (cuda_include / "cuda_runtime_api.h").is_file():
        pytest.skip(f"CUDA headers not found in {cuda_include}")
    exe = tmp_path / "pluginHostTest"
    cmd = ["g++", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-isystem", str(headers), "-isystem", str(cuda_include),
           "-I", str(ROOT / "cpp" / "include"), "-I", str(ROOT / "cpp" / "src"), "-I", str(PLUGINS),
           str(PLUGINS / "tests" / "pluginHostTest.cpp"), *map(str, sorted(PLUGINS.glob("trtSpec*/*Plugin.cpp"))),
           "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "all checks passed" in run.stdout


def test_plugin_specs_ship_as_the_package_trtspec_pluginspecs(monkeypatch):
    """Installed without a source tree, the interface YAMLs come from the package ``trtspec.pluginspecs``
    (setup.py maps it to plugins/ and ships plugins/*/*.yaml); TRTSPEC_PLUGIN_SPECS still wins."""
    import importlib.resources

    from trtspec.onnx_schemas import plugin_yaml_paths

    monkeypatch.delenv("TRTSPEC_PLUGIN_SPECS", raising=False)
    root = Path(str(importlib.resources.files("trtspec.pluginspecs")))
    shipped = sorted(root.glob("trtSpec*/trtSpec*.yaml"))
    assert [p.name for p in shipped] == ["trtSpecTreeMask.yaml", "trtSpecVerifyBlock.yaml",
                                         "trtSpecVerifyGreedy.yaml", "trtSpecVerifySample.yaml"]
    assert plugin_yaml_paths() == shipped
    monkeypatch.setenv("TRTSPEC_PLUGIN_SPECS", str(root / "trtSpecTreeMask"))
    assert [p.name for p in plugin_yaml_paths()] == ["trtSpecTreeMask.yaml"]
