"""Find a ``tritonserver`` binary and run it on loopback for a model repository.

Where a server is looked for, in order:

1. ``$TRTSPEC_TRITONSERVER`` (path to a ``tritonserver`` binary);
2. ``tritonserver`` on ``PATH`` (e.g. an NGC Triton container; backends in ``<bin>/../backends``);
3. the server unpacked from the nvidia-pytriton wheel by :mod:`trtspec.triton.install`
   (``~/.cache/trtspec/tritonserver/<version>``);
4. an installed ``nvidia-pytriton`` package (``site-packages/pytriton/tritonserver``).

The wheel's server needs three things a container has already: the running Python's
``libpython3.X.so`` first on ``LD_LIBRARY_PATH`` together with the wheel's ``nvidia_pytriton.libs``,
and the Python-backend stub built for this Python version next to ``libtriton_python.so``. We
prepare a backend folder per Python version (``backends-py3.X/python``) holding copies of the three
files, so the unpacked wheel itself is never modified after install.

Python-backend models run in a stub process with an embedded, isolated interpreter: it ignores
``PYTHONPATH`` and finds its prefix from the first ``python3`` on ``PATH`` (a venv is recognised by its
``pyvenv.cfg``). So the server gets ``PATH`` starting with this interpreter's ``bin``; for the wheel's
server (whose stub needs numpy 1.x, see :data:`trtspec.triton.install.STUB_NUMPY`) it starts instead
with a small overlay environment whose ``site-packages`` puts that numpy first and then adds this
environment's ``site-packages`` (with its ``.pth`` files, so editable installs work).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.triton import install as _install

HOW_TO_INSTALL = (
    "No tritonserver found. Install one without touching this Python environment with\n"
    "    trtspec triton install-server      (or: bash .ci/install_tritonserver)\n"
    "which unpacks the server from the nvidia-pytriton wheel into %s,\n"
    "or put a tritonserver binary on PATH (NGC container nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3),\n"
    "or set TRTSPEC_TRITONSERVER=/path/to/tritonserver."
)


#: Triton's log line for a model that failed to load: ``failed to load 'M' version 1: <cause>``.
_LOAD_FAILURE = re.compile(r"failed to load '([^']+)' version \d+: (.*)$")


class ServerNotFoundError(RuntimeError):
    """No ``tritonserver`` binary could be found; the message says how to get one."""


@dataclass(frozen=True)
class ServerInstall:
    """A ``tritonserver`` binary and what it needs to run.

    Attributes:
        binary: the ``tritonserver`` executable.
        backend_dir: folder passed as ``--backend-directory`` (holds ``python/``).
        lib_dirs: folders prepended to ``LD_LIBRARY_PATH`` (empty for a container install).
        origin: where it was found: ``env``, ``path``, ``cache`` or ``pytriton``.
        stub_numpy: a folder holding the numpy the stub must import first (wheel installs), or None.
    """

    binary: Path
    backend_dir: Path
    lib_dirs: tuple[Path, ...] = ()
    origin: str = "path"
    stub_numpy: Path | None = None

    def __post_init__(self) -> None:
        if not self.binary.is_file():
            raise ValueError(f"binary: {self.binary} is not a file")
        if not (self.backend_dir / "python").is_dir():
            raise ValueError(f"backend_dir: {self.backend_dir} has no python/ backend folder")

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the server process: libraries, and this environment's packages for the stub."""
        env = dict(os.environ if base is None else base)
        libs = [str(p) for p in self.lib_dirs]
        if env.get("LD_LIBRARY_PATH"):
            libs.append(env["LD_LIBRARY_PATH"])
        if libs:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        if self.stub_numpy is not None:
            bindir = _stub_env(self.backend_dir.parent, self.stub_numpy) / "bin"
        else:
            bindir = Path(sys.executable).parent
        env["PATH"] = os.pathsep.join([str(bindir)] + ([env["PATH"]] if env.get("PATH") else []))
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env


def _stub_env(parent: Path, numpy_dir: Path) -> Path:
    """An overlay environment (``pyvenv.cfg`` + ``bin/python3``) for the stub; cached by content."""
    base = Path(getattr(sys, "_base_executable", "") or sys.executable).resolve()
    sites = python_paths()
    key = hashlib.sha1(json.dumps([str(base), sites, str(numpy_dir)]).encode()).hexdigest()[:12]
    out = parent / f"stub-env-{key}"
    if (out / ".complete").is_file():
        return out
    tag = _python_tag()
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=".stub-env."))
    try:
        (tmp / "bin").mkdir()
        os.symlink(base, tmp / "bin" / "python3")
        site_dir = tmp / "lib" / f"python{tag}" / "site-packages"
        site_dir.mkdir(parents=True)
        (tmp / "pyvenv.cfg").write_text(
            f"home = {base.parent}\ninclude-system-site-packages = false\n"
            f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n")
        lines = [str(numpy_dir), sites[0]]
        lines += [f"import site; site.addsitedir({p!r})" for p in sites[1:]]
        (site_dir / "00-trtspec-stub.pth").write_text("\n".join(lines) + "\n")
        (tmp / ".complete").write_text("\n".join(sites) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def python_paths() -> list[str]:
    """Folders the model's stub interpreter needs: where trtspec is imported from, then site-packages."""
    import trtspec

    paths = [str(Path(trtspec.__file__).resolve().parent.parent)]
    paths += [p for p in sysconfig.get_paths().get("purelib", "").split(os.pathsep) if p]
    paths += [p for p in sysconfig.get_paths().get("platlib", "").split(os.pathsep) if p]
    return list(dict.fromkeys(paths))


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _libpython_dir() -> Path:
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "")
    name = f"libpython{_python_tag()}.so.1.0"
    for cand in (libdir, Path(sys.base_prefix) / "lib"):
        if (cand / name).exists():
            return cand
    raise ServerNotFoundError(
        f"The Python backend stub needs {name}, which this Python ({sys.executable}) does not ship "
        "(it was built without --enable-shared). Use a Python with a shared libpython, or a Triton container.")


def _prepare_wheel_backend(tritonserver_dir: Path) -> Path:
    """``<tritonserver_dir>/backends-py3.X`` with ``python/`` holding the backend and this Python's stub."""
    tag = _python_tag()
    stub = tritonserver_dir / "python_backend_stubs" / tag / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerNotFoundError(f"{tritonserver_dir} has no Python backend stub for Python {tag}")
    out = tritonserver_dir / f"backends-py{tag}"
    if (out / "python" / ".complete").is_file():
        return out
    src = tritonserver_dir / "backends" / "python"
    tmp = Path(tempfile.mkdtemp(dir=tritonserver_dir, prefix=f".backends-py{tag}."))
    try:
        (tmp / "python").mkdir()
        for f in src.iterdir():
            shutil.copy2(f, tmp / "python" / f.name)
        shutil.copy2(stub, tmp / "python" / stub.name)
        os.chmod(tmp / "python" / stub.name, 0o755)
        (tmp / "python" / ".complete").write_text(f"python {tag}\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _wheel_install(root: Path, origin: str) -> ServerInstall | None:
    """A server laid out like the nvidia-pytriton wheel under ``root`` (pytriton/, nvidia_pytriton.libs/)."""
    tsdir = root / "pytriton" / "tritonserver"
    binary = tsdir / "bin" / "tritonserver"
    if not binary.is_file():
        return None
    backend = _prepare_wheel_backend(tsdir)
    numpy_dir = None
    if _numpy_major() >= 2:
        numpy_dir = _install.stub_numpy_dir(root)
        if not (numpy_dir / ".complete").is_file():
            numpy_dir = _install.install_stub_numpy(root, quiet=True)
    return ServerInstall(binary=binary, backend_dir=backend, stub_numpy=numpy_dir,
                         lib_dirs=(_libpython_dir(), root / "nvidia_pytriton.libs"), origin=origin)


def _numpy_major() -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("numpy").split(".")[0])
    except PackageNotFoundError:
        return 0


def _container_install(binary: Path, origin: str) -> ServerInstall:
    binary = binary.resolve()
    parts = binary.parts
    if len(parts) >= 3 and parts[-3:-1] == ("tritonserver", "bin") and parts[-4:-3] == ("pytriton",):
        found = _wheel_install(binary.parents[3], origin)
        if found is not None:
            return found
    backend = binary.parent.parent / "backends"
    if not (backend / "python").is_dir():
        backend = Path("/opt/tritonserver/backends")
    return ServerInstall(binary=binary, backend_dir=backend, origin=origin)


def find_server(cache_dir: Path | None = None) -> ServerInstall:
    """The first server found in the order of this module's docstring; :class:`ServerNotFoundError` if none."""
    env = os.environ.get("TRTSPEC_TRITONSERVER")
    if env:
        if not Path(env).is_file():
            raise ServerNotFoundError(f"TRTSPEC_TRITONSERVER={env} is not a file")
        return _container_install(Path(env), "env")
    on_path = shutil.which("tritonserver")
    if on_path:
        return _container_install(Path(on_path), "path")
    cached = _install.install_root(cache_dir=cache_dir)
    if _install.is_installed(cache_dir=cache_dir):
        found = _wheel_install(cached, "cache")
        if found is not None:
            return found
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is not None and spec.submodule_search_locations:
        found = _wheel_install(Path(list(spec.submodule_search_locations)[0]).parent, "pytriton")
        if found is not None:
            return found
    raise ServerNotFoundError(HOW_TO_INSTALL % cached)


@dataclass(frozen=True)
class ServeConfig:
    """Options of ``trtspec serve``.

    Attributes:
        host: address to bind; loopback by default (127.0.0.1).
        http_port, grpc_port, metrics_port: Triton's usual 8000, 8001, 8002; 0 = choose a free port.
        model_name: Triton model name. Default ``trtspec``.
        ready_timeout_s: seconds to wait for the model to load. Default 600.
    """

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_name: str = "trtspec"
    ready_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, name)
            if not isinstance(port, int) or not 0 <= port < 65536:
                raise ValueError(f"{name}: expected 0 (free) or a TCP port 1..65535, got {port!r}")
        ports = [p for p in (self.http_port, self.grpc_port, self.metrics_port) if p]
        if len(ports) != len(set(ports)):
            raise ValueError(f"http_port, grpc_port and metrics_port must differ, got {ports}")
        if self.ready_timeout_s <= 0:
            raise ValueError(f"ready_timeout_s: expected > 0, got {self.ready_timeout_s}")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the server if the thread that started it dies (no orphaned servers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class TritonServer:
    """A ``tritonserver`` process serving ``repository`` on loopback.

    Ports of 0 are chosen free at start. Use as a context manager, or call :meth:`start` and
    :meth:`stop`. The server runs in its own process group; :meth:`stop` sends SIGINT, waits, and
    kills the group if it lingers, so no stub process survives. On Linux the server also gets
    SIGTERM if the thread that started it dies (call :meth:`start` from a long-lived thread).

    Attributes:
        repository: the Triton model repository folder.
        install: the server to run (default :func:`find_server`).
        host: address to bind (default 127.0.0.1).
        http_port, grpc_port, metrics_port: ports (0 = choose a free one).
        log_path: where the server's stdout/stderr go (default a temp file).
        extra_args: further ``tritonserver`` arguments.
    """

    repository: Path
    install: ServerInstall | None = None
    host: str = "127.0.0.1"
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    log_path: Path | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.repository = Path(self.repository)
        if not self.repository.is_dir():
            raise ValueError(f"repository: {self.repository} is not a directory")
        for name in ("http_port", "grpc_port", "metrics_port"):
            port = getattr(self, name)
            if not 0 <= int(port) < 65536:
                raise ValueError(f"{name}: expected 0 (free) or a TCP port, got {port}")

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        assert self.install is not None
        return [str(self.install.binary), f"--model-repository={self.repository}",
                f"--backend-directory={self.install.backend_dir}",
                f"--http-address={self.host}", f"--http-port={self.http_port}",
                f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
                f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
                "--allow-metrics=true", "--allow-gpu-metrics=false", "--allow-cpu-metrics=true",
                "--exit-on-error=true", "--strict-readiness=true", "--exit-timeout-secs=10",
                *self.extra_args]

    def start(self, timeout: float = 300.0) -> "TritonServer":
        """Start the server and wait until it and every model in the repository are ready.

        Ports given as 0 are chosen free now (and again on a later restart)."""
        if self.process is not None:
            raise RuntimeError("server already started")
        self.install = self.install or find_server()
        if not hasattr(self, "_requested_ports"):
            self._requested_ports = (self.http_port, self.grpc_port, self.metrics_port)
        for port, requested in zip(("http_port", "grpc_port", "metrics_port"), self._requested_ports):
            setattr(self, port, requested or free_port(self.host))
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tritonserver.", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        env = self.install.environment()
        env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, env=env,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}{path}", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout):
            return 0, b""

    def log_tail(self, n: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def load_errors(self) -> list[str]:
        """``model 'M' failed to load: <cause>`` for each model load failure in the server's log."""
        if self.log_path is None or not self.log_path.exists():
            return []
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            m = _LOAD_FAILURE.search(line)
            if m:  # the log quotes the message and escapes the traceback after it as "\n\nAt:\n..."
                cause = m.group(2).split("\\n")[0].rstrip('"').strip()
                found.append(f"model {m.group(1)!r} failed to load: {cause}")
        return list(dict.fromkeys(found))

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Poll ``/v2/health/ready`` (strict: every model ready) until it answers 200. A server that
        exits first raises RuntimeError starting with each model's load failure and its cause."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                causes = "".join(f"{e}\n" for e in self.load_errors())
                raise RuntimeError(f"{causes}tritonserver exited with code {code} before it was ready; "
                                   f"log {self.log_path}:\n{self.log_tail()}")
            status, _ = self._get("/v2/health/ready")
            if status == 200:
                return
            time.sleep(0.25)
        raise TimeoutError(f"tritonserver not ready after {timeout:.0f} s; log {self.log_path}:\n{self.log_tail()}")

    def models(self) -> list[dict]:
        """The repository index (``POST /v2/repository/index``): name, version, state of each model."""
        req = urllib.request.Request(f"http://{self.http_url}/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGINT, then SIGTERM, then SIGKILL to the process group; return the server's exit code."""
        proc, self.process = self.process, None
        if proc is None:
            return None
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        # Whatever remains of the group (stub processes) goes too.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return proc.wait()

    def __enter__(self) -> "TritonServer":
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
