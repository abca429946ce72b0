"""JSON Lines input (one JSON value per line, blank lines skipped), read the same way everywhere a
command takes a ``.jsonl`` file: errors name the line, and the column where the source says one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator


class JsonlError(ValueError):
    """A line that is not UTF-8 or not JSON; the message starts with ``line N:``."""


def read_jsonl(source: str | Path | bytes) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of every non-blank line of a file (or of its bytes), 1-based."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonlError(f"line {lineno}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column "
                             f"{exc.start + 1})") from None
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JsonlError(f"line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        yield lineno, value
