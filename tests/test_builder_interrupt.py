"""Ctrl-C and SIGTERM stop ``trtspec build`` at any stage, within seconds, leaving no bundle.

The child build (tests/interrupt_child.py) writes a marker when it reaches a stage; the signal is
sent then, not after a sleep. Children start with SIGINT at its default disposition: a test
process may itself have been started with SIGINT ignored (a background job of a non-interactive
shell), which its children would inherit, and an ignored SIGINT stays ignored (see
trtspec.builder.interrupt).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_fixtures import make_model

from trtspec.builder.bundle import AtomicDir
from trtspec.builder.interrupt import BuildInterrupted, deferred, exit_code, interruptible

CHILD = Path(__file__).parent / "interrupt_child.py"
#: seconds from the signal to the child's build returning (cleanup done; measured well under 1 s quiet,
#: under 0.1 s at load 20) and to the process exiting (interpreter shutdown: ~7 s at load 20)
CLEANUP_LIMIT, EXIT_LIMIT = 10.0, 60.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    return make_model(root / "target", hidden=128, seed=0), make_model(root / "draft", hidden=128, seed=1)


def _start(stage: str, tmp_path: Path, pair, sigint: str):
    target, draft = pair
    marker = tmp_path / f"{stage}.reached"
    disposition = signal.SIG_IGN if sigint == "ignored" else signal.SIG_DFL  # see default_sigint()
    proc = subprocess.Popen([sys.executable, str(CHILD), stage, str(marker), str(target), str(draft),
                             str(tmp_path / "bundle")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition))
    return proc, marker


def _wait_for(proc, marker: Path, timeout: float = 300.0) -> None:
    deadline = time.time() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            pytest.fail(f"child exited ({proc.returncode}) before reaching the stage:\n{proc.stdout.read()}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"child did not reach the stage in {timeout} s:\n{proc.communicate()[0]}")
        time.sleep(0.05)


@pytest.mark.parametrize("stage, signum, sigint", [
    ("recipe", signal.SIGINT, "default"),
    ("calibration", signal.SIGINT, "default"),
    ("awq_search", signal.SIGTERM, "ignored"),
    ("export", signal.SIGTERM, "default"),
])
def test_signal_mid_build_stops_it_and_leaves_no_bundle(tmp_path, pair, stage, signum, sigint):
    proc, marker = _start(stage, tmp_path, pair, sigint)
    _wait_for(proc, marker)
    sent = time.time()
    proc.send_signal(signum)
    try:
        output, _ = proc.communicate(timeout=EXIT_LIMIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{signal.Signals(signum).name} at {stage}: still running {EXIT_LIMIT} s later\n"
                    f"{proc.communicate()[0]}")
    exited = time.time() - sent
    assert proc.returncode == 128 + signum, output
    done = Path(f"{marker}.done").read_text().splitlines()
    assert done[1] == f"BuildInterrupted: interrupted by {signal.Signals(signum).name}"
    cleanup = float(done[0]) - sent
    assert cleanup < CLEANUP_LIMIT, f"build took {cleanup:.1f} s to return after the signal"
    print(f"{stage}: build returned {cleanup:.2f} s, process exited {exited:.2f} s after the signal")
    assert not (tmp_path / "bundle").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".bundle.")]


def test_sigint_inherited_as_ignored_stays_ignored_and_sigterm_still_interrupts():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with pytest.raises(BuildInterrupted) as err:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler runs at the next bytecode
        assert err.value.signum == signal.SIGTERM and exit_code(err.value) == 143
    finally:
        signal.signal(signal.SIGINT, old)


def test_handlers_are_restored_after_the_build():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(BuildInterrupted) as err:
        with interruptible():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert str(err.value) == "interrupted by SIGINT" and err.value.exit_code == 130
    assert {s: signal.getsignal(s) for s in before} == before
    assert exit_code(KeyboardInterrupt()) == 130


def test_second_signal_waits_for_the_cleanup(tmp_path, monkeypatch):
    """A SIGTERM that arrives while AtomicDir removes its temporary directory after a Ctrl-C is held
    until the directory is gone, then raised."""
    import shutil

    real_rmtree = shutil.rmtree

    def rmtree_signalled_midway(path, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # without deferred() the handler would raise here, before anything is removed
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree_signalled_midway)
    with pytest.raises(BuildInterrupted) as err:
        with interruptible():
            with AtomicDir(tmp_path / "out") as tmp:
                for i in range(50):
                    (tmp / f"f{i}").write_text("x")
                raise BuildInterrupted(signal.SIGINT)
    assert err.value.signum == signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
