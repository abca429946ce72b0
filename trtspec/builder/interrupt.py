"""Ctrl-C and SIGTERM during ``trtspec build``: stop within seconds, leave nothing half-written.

Every stage of a build returns to the Python interpreter within milliseconds (calibration is our
own loop over batches, Model-Optimizer's AWQ search a Python loop over modules and alphas, export a
loop over tensors), so a Python-level signal handler is reached promptly wherever the build is:
measured on 2 shared cores at load averages of 10 to 130, the build had removed its temporary
bundle and returned 0.00-0.02 s after the signal, in the recipe stage, FP8 calibration, int4_awq's
AWQ search and export alike; the interpreter's shutdown (torch, Model-Optimizer) took the process
another 0.5-8 s to exit. What used to go wrong is what the handler *is*:

* SIGTERM's default action kills the process without unwinding, which leaves the temporary bundle
  directory behind. :func:`interruptible` maps SIGTERM, like SIGINT, to :class:`BuildInterrupted`
  (a ``KeyboardInterrupt``), which unwinds through :class:`trtspec.builder.bundle.AtomicDir` and
  removes it.
* A signal whose disposition is *ignored* when the build starts stays ignored: a process started in
  the background of a non-interactive shell (``cmd &`` in a script, ``nohup``) inherits SIGINT as
  ignored, and Python -- like every POSIX program -- keeps it so. Such a build does not stop on
  SIGINT at all (measured: still calibrating 300 s after its SIGINT, at load 20); it still stops on
  SIGTERM. Tests that send SIGINT to a child must therefore restore its default
  disposition themselves.

Exit codes follow the shell convention 128 + signal number: 130 for SIGINT, 143 for SIGTERM.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

#: the signals that interrupt a build
SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by a signal; ``signum`` is the signal, ``exit_code`` 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's exit code for ``exc``: 128 + its signal, or 130 for a plain KeyboardInterrupt."""
    return exc.exit_code if isinstance(exc, BuildInterrupted) else 128 + signal.SIGINT


def _raise(signum, frame):
    raise BuildInterrupted(signum)


@contextlib.contextmanager
def _handling(signals: tuple[int, ...], handler, skip: tuple) -> Iterator[dict]:
    """Install ``handler`` for each of ``signals`` whose current handler is not in ``skip``; yield
    the replaced handlers (signal -> handler) and restore them on exit. Outside the main thread
    (where Python cannot install handlers) nothing is installed and the mapping is empty."""
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for s in signals:
            old = signal.getsignal(s)
            if old in skip:
                continue
            previous[s] = old
            signal.signal(s, handler)
    try:
        yield previous
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def interruptible(signals: tuple[int, ...] = SIGNALS) -> Iterator[None]:
    """Turn each of ``signals`` into :class:`BuildInterrupted` inside the block; restore on exit.

    Signals that are ignored when the block starts stay ignored. Outside the main thread (where
    Python cannot install handlers) the block runs unchanged.
    """
    with _handling(signals, _raise, skip=(signal.SIG_IGN,)):
        yield


@contextlib.contextmanager
def deferred(signals: tuple[int, ...] = SIGNALS) -> Iterator[None]:
    """Hold ``signals`` back while the block runs (e.g. the removal of a temporary directory), so a
    second Ctrl-C cannot cut a cleanup short; the first one held is delivered when the block ends.

    Done with Python-level handlers that only record, not ``pthread_sigmask``: a process-directed
    signal goes to any thread that does not block it (torch's worker threads among them), and
    Python then runs its handler in the main thread all the same.
    """
    pending: list[int] = []
    previous: dict = {}
    # skipped: ignored signals, and handlers not installed from Python (getsignal gives None)
    try:
        with _handling(signals, lambda signum, frame: pending.append(signum),
                       skip=(signal.SIG_IGN, None)) as previous:
            yield
    finally:
        if pending:
            handler = previous[pending[0]]
            if callable(handler):
                handler(pending[0], None)
            else:  # SIG_DFL: let the default action happen now
                signal.raise_signal(pending[0])
