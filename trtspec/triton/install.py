"""Install a standalone ``tritonserver`` without touching the Python environment.

The ``nvidia-pytriton`` wheel carries a complete ``tritonserver`` binary with the Python backend
(``pytriton/tritonserver/``) and the shared libraries it links (``nvidia_pytriton.libs/``).
Installing the wheel with pip would downgrade numpy and protobuf, so we download it without its
dependencies and unpack only those two folders into a cache directory::

    <cache>/<wheel version>/pytriton/tritonserver/{bin,backends,python_backend_stubs,caches}
    <cache>/<wheel version>/nvidia_pytriton.libs/

The binaries find ``nvidia_pytriton.libs`` through their RPATH (``$ORIGIN/../../../nvidia_pytriton.libs``),
so the relative layout is kept. Installing is idempotent: a complete install (marked by a
``.complete`` file written last) is left alone.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: The nvidia-pytriton wheel whose server we unpack (tritonserver 2.51, Python backend, stubs for 3.8-3.13).
PYTRITON_VERSION = "0.7.0"
#: numpy for the wheel's Python-backend stub: its pybind11 reads numpy 1.x array descriptors, so with
#: numpy 2 every BYTES input arrives corrupted. The stub gets this numpy; the environment keeps its own.
STUB_NUMPY = "1.26.4"
#: Folders of the wheel that make up the server.
_WHEEL_PREFIXES = ("pytriton/tritonserver/", "nvidia_pytriton.libs/")


def default_cache_dir() -> Path:
    """Where servers are installed: ``$TRTSPEC_TRITON_HOME`` or ``~/.cache/trtspec/tritonserver``."""
    env = os.environ.get("TRTSPEC_TRITON_HOME")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trtspec" / "tritonserver"


def install_root(version: str = PYTRITON_VERSION, cache_dir: Path | None = None) -> Path:
    """The folder one wheel version unpacks into (it exists only after :func:`install_server`)."""
    return Path(cache_dir or default_cache_dir()) / version


def is_installed(version: str = PYTRITON_VERSION, cache_dir: Path | None = None) -> bool:
    return (install_root(version, cache_dir) / ".complete").is_file()


def _download_wheel(version: str, dest: Path, quiet: bool) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"nvidia-pytriton=={version}", "--no-deps",
           "--only-binary=:all:", "-d", str(dest)]
    if quiet:
        cmd.append("-q")
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("nvidia_pytriton-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download nvidia-pytriton=={version} produced no wheel in {dest}")
    return wheels[0]


def unpack_wheel(wheel: Path, root: Path) -> None:
    """Extract the server folders of ``wheel`` into ``root`` (created), keeping file modes."""
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.infolist() if m.filename.startswith(_WHEEL_PREFIXES)]
        if not any(m.filename.endswith("bin/tritonserver") for m in members):
            raise ValueError(f"{wheel} holds no pytriton/tritonserver/bin/tritonserver")
        for m in members:
            target = root / m.filename
            if m.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (m.external_attr >> 16) & 0o777
            os.chmod(target, mode | 0o644 if mode else 0o644)
    for exe in list((root / "pytriton/tritonserver/bin").iterdir()) + list(
            (root / "pytriton/tritonserver/python_backend_stubs").glob("*/triton_python_backend_stub")):
        os.chmod(exe, 0o755)


def install_server(version: str = PYTRITON_VERSION, cache_dir: Path | None = None, *,
                   wheel: Path | None = None, force: bool = False, quiet: bool = False) -> Path:
    """Download (unless ``wheel`` is given) and unpack the server; return the install root.

    Args:
        version: nvidia-pytriton version to download. Default :data:`PYTRITON_VERSION`.
        cache_dir: parent folder of installs. Default :func:`default_cache_dir`.
        wheel: a local ``nvidia_pytriton-*.whl`` to unpack instead of downloading.
        force: reinstall even when a complete install exists.
    """
    root = install_root(version, cache_dir)
    if is_installed(version, cache_dir) and not force:
        install_stub_numpy(root, quiet=quiet)
        return root
    if wheel is not None and not Path(wheel).is_file():
        raise FileNotFoundError(f"wheel: no such file {wheel}")
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{version}.") as tmp:
        tmp_path = Path(tmp)
        whl = Path(wheel) if wheel is not None else _download_wheel(version, tmp_path / "dl", quiet)
        staging = tmp_path / "root"
        unpack_wheel(whl, staging)
        (staging / ".complete").write_text(f"nvidia-pytriton=={version}\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(staging, root)
    install_stub_numpy(root, quiet=quiet)
    return root


def stub_numpy_dir(root: Path, python_tag: str | None = None) -> Path:
    """``<root>/stub-numpy-py3.X``: numpy :data:`STUB_NUMPY` for the stub of Python ``python_tag``."""
    tag = python_tag or f"{sys.version_info.major}.{sys.version_info.minor}"
    return Path(root) / f"stub-numpy-py{tag}"


def install_stub_numpy(root: Path, *, quiet: bool = False) -> Path:
    """Put numpy :data:`STUB_NUMPY` (for the running Python) into :func:`stub_numpy_dir`; idempotent."""
    out = stub_numpy_dir(root)
    if (out / ".complete").is_file():
        return out
    with tempfile.TemporaryDirectory(dir=root, prefix=".stub-numpy.") as tmp:
        staging = Path(tmp) / "site"
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--target",
               str(staging), f"numpy=={STUB_NUMPY}"]
        if quiet:
            cmd.append("-q")
        subprocess.run(cmd, check=True)
        (staging / ".complete").write_text(f"numpy=={STUB_NUMPY}\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m trtspec.triton.install [--force]``: used by ``.ci/install_tritonserver``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=PYTRITON_VERSION, help="nvidia-pytriton wheel version")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: %s" % default_cache_dir())
    parser.add_argument("--wheel", type=Path, default=None, help="unpack this local wheel instead of downloading")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    root = install_server(args.version, args.cache_dir, wheel=args.wheel, force=args.force)
    print(root / "pytriton/tritonserver/bin/tritonserver")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
