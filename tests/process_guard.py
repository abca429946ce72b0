"""The live descendants of a process, read from /proc (Linux), for the leftover-process check in
conftest.py: which test a process appeared after, and which are still alive at the end."""
from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Iterable


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0]


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:160] or "?"


def live_descendants(root: int) -> set[int]:
    """Pids of the processes below ``root`` that are not zombies (dead but not yet reaped)."""
    if not Path("/proc").is_dir():
        return set()
    children: dict[int, list[int]] = {}
    states: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                children.setdefault(st[0], []).append(int(entry))
                states[int(entry)] = st[1]
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return {p for p in out if states.get(p) != "Z"}


def default_sigint() -> None:
    """``preexec_fn`` for a child a test will send SIGINT: restore SIGINT's default disposition,
    which the child would otherwise inherit as ignored when the test run itself was started in the
    background of a non-interactive shell (an ignored SIGINT stays ignored in Python)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class ProcessGuard:
    """Tracks the live descendants of ``root`` across tests."""

    def __init__(self, root: int):
        self.root = root
        self.first_seen: dict[int, str] = {}

    def note(self, test: str) -> None:
        for pid in live_descendants(self.root):
            self.first_seen.setdefault(pid, test)

    def survivors(self) -> list[tuple[int, str, str]]:
        """(pid, command line, test after which it was first seen) of each live descendant."""
        return [(pid, _cmdline(pid), self.first_seen.get(pid, "the session's start or end"))
                for pid in sorted(live_descendants(self.root))]

    @staticmethod
    def kill(pids: Iterable[int]) -> None:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
