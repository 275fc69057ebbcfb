"""The training corpus: this Python's own standard-library source, chosen deterministically.

Files are selected by a fixed rule, split by file into train / held-out, and recorded with
their sha256 in `corpus_manifest.txt`, so anyone can check (and the labs can re-read) exactly
what the bundled models saw.
"""

from __future__ import annotations

import hashlib
import platform
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "lib2to3"}
SKIP_DIRS |= {"encodings", "pydoc_data"}  # generated codec tables / pydoc topic dump
MAX_FILE_BYTES = 100_000  # larger stdlib files are mostly generated or one-off giants
HELDOUT_EVERY = 20  # every 20th selected file (sorted by path) is held out
DEFAULT_CORPUS_MB = 6.0  # corpus cap (1e6 bytes): ~1.6M train tokens, seen about twice a run


@dataclass(frozen=True)
class SourceFile:
    """One stdlib .py file: path relative to the stdlib root, sha256 of its bytes, size."""

    rel_path: str
    sha256: str
    num_bytes: int
    split: str  # "train" or "heldout"


def stdlib_dir() -> Path:
    """The directory holding this interpreter's standard-library .py files."""
    return Path(sysconfig.get_paths()["stdlib"])


def _candidates(root: Path) -> list[Path]:
    """Sorted stdlib .py files, minus tests, IDLE, demos, site-packages and huge files."""
    files = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        parts = path.relative_to(root).parts
        if SKIP_DIRS & set(parts[:-1]) or path.stat().st_size > MAX_FILE_BYTES:
            continue
        files.append(path)
    return files


def select_corpus(root: Path, cap_bytes: int) -> list[SourceFile]:
    """Pick files up to `cap_bytes` (bytes) and split them by file into train / held-out.

    Files are ranked by sha256 of their relative path (a fixed, well-spread order that does
    not favour early letters), taken until the cap, then re-sorted by path; every
    HELDOUT_EVERY-th file of that sorted list is held out.
    """
    ranked = sorted(_candidates(root), key=lambda p: _sha(p.relative_to(root).as_posix()))
    chosen, total = [], 0
    for path in ranked:
        data = path.read_bytes()
        if total + len(data) > cap_bytes or "\ufffd" in data.decode("utf-8", "replace"):
            continue
        chosen.append((path.relative_to(root).as_posix(), data))
        total += len(data)
    chosen.sort()
    return [
        SourceFile(rel, hashlib.sha256(data).hexdigest(), len(data), _split_of(i))
        for i, (rel, data) in enumerate(chosen)
    ]


def _split_of(index: int) -> str:
    return "heldout" if index % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(files: list[SourceFile], path: Path) -> None:
    """Write the corpus manifest: a Python-version header, then split/sha256/bytes/path."""
    lines = [
        "# lab.engine corpus: CPython standard-library source files (PSF licence)",
        f"# python_version: {platform.python_version()}",
        f"# cap rules: skip dirs {sorted(SKIP_DIRS)}, files > {MAX_FILE_BYTES} bytes",
        "# columns: split<TAB>sha256<TAB>bytes<TAB>path relative to sysconfig stdlib",
    ]
    lines += [f"{f.split}\t{f.sha256}\t{f.num_bytes}\t{f.rel_path}" for f in files]
    path.write_text("\n".join(lines) + "\n")


def read_manifest(path: Path) -> tuple[str, list[SourceFile]]:
    """Parse a manifest written by `write_manifest`: (python_version, files)."""
    version, files = "", []
    for line in path.read_text().splitlines():
        if line.startswith("# python_version:"):
            version = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            split, sha, num_bytes, rel = line.split("\t")
            files.append(SourceFile(rel, sha, int(num_bytes), split))
    return version, files


_DECORATION_LINE = re.compile(r"^[ \t]*#[ \t#=*~-]*\n", re.MULTILINE)


def clean_source(text: str) -> str:
    """Drop comment lines that are pure decoration (`#`, `# ----`, `#####`): licence
    banners and separators are runs of them, and a small model learns to emit them
    forever. Everything else is the file as written."""
    return _DECORATION_LINE.sub("", text)


def read_texts(root: Path, files: list[SourceFile], split: str) -> list[str]:
    """The source text of every manifest file in `split` (decoration lines dropped)."""
    return [
        clean_source((root / f.rel_path).read_text(encoding="utf-8"))
        for f in files
        if f.split == split
    ]
