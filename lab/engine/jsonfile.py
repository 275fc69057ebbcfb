"""A small JSON file of cached measurements (device constants, the engine's dtype): read
tolerantly, written atomically, so concurrent workers see the old or the new file."""

from __future__ import annotations

import json
import os
from pathlib import Path


def read(path: Path | None) -> dict:
    """The file's entries; {} when there is no path, no file, or a half-written one."""
    if path is None:
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # missing or half-written: measure again
        return {}


def write(path: Path, entries: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new file
