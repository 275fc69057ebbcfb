"""`python -m bench.sitting --base REF -- bench.engine --threads 1`: one benchmark, two commits,
one sitting.

A benchmark's ratios (ours vs a baseline, measured side by side in one run) still drift a few
per cent between sittings on a shared machine, so "did this commit make it slower?" is only
answered by running the old and the new commit back to back, alternating (base, head, base,
head, ...) so a noisy minute hurts both. The base commit is checked out in a temporary git
worktree (removed afterwards); head is this checkout as it is. Both run with this venv's
Python, from their own directory, so each imports its own code.

Every ratio the benchmark prints (`1.07x`, `**1.76x**`, a `0.24` in an `on/off` column is not
one: only numbers written with an `x` or `×`) is read from each run, keyed by the line it sits on
(the table row's first cell, or the text before the number), and printed base vs head with
the change; per run the median of the rounds is taken. Whether a higher ratio is better or
worse depends on the benchmark (time per token vs throughput): the table says which way each
line moved, the reader says whether that is worse.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench-sitting"  # each run's full output, to read the tables behind a ratio
RATIO = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[x×](?!\w)")


def ratios(output: str) -> dict[str, list[float]]:
    """Each line holding a ratio, keyed by its label, with the ratios in the order printed."""
    found: dict[str, list[float]] = {}
    for line in output.splitlines():
        values = [float(v) for v in RATIO.findall(line)]
        if not values:
            continue
        found[_label(line)] = values
    return found


def _label(line: str) -> str:
    if line.lstrip().startswith("|"):
        return line.strip().strip("|").split("|")[0].strip()
    head = RATIO.split(line)[0]
    return re.sub(r"[*=\s]+$", "", head).strip() or line.strip()


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="bench-base-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), ref],
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False
            )


def run_once(tree: Path, argv: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=tree, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"{tree}: `python -m {' '.join(argv)}` failed:\n{done.stderr[-3000:]}")
    return done.stdout


def compare(runs: dict[str, list[dict[str, list[float]]]]) -> list[str]:
    base = _median(runs["base"])
    head = _median(runs["head"])
    lines = ["| line | base | head | head/base |", "|---|---|---|---|"]
    for label, values in base.items():
        if label not in head or len(head[label]) != len(values):
            lines.append(f"| {label} | {_fmt(values)} | (not printed by head) | |")
            continue
        change = ", ".join(
            f"{h / b:.3f}" if b else "n/a" for b, h in zip(values, head[label], strict=True)
        )
        lines.append(f"| {label} | {_fmt(values)} | {_fmt(head[label])} | {change} |")
    lines += [
        f"| {label} | (not printed by base) | {_fmt(v)} | |"
        for label, v in head.items()
        if label not in base
    ]
    return lines


def _median(rounds: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for label in rounds[0]:
        columns = zip(
            *(r[label] for r in rounds if len(r.get(label, [])) == len(rounds[0][label])),
            strict=True,
        )
        out[label] = [statistics.median(c) for c in columns]
    return out


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}x" for v in values)


def cli(argv: list[str] | None = None) -> None:  # not main(): `python -m bench` runs every main()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git ref of the old commit")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each commit, alternating")
    parser.add_argument("module", nargs=argparse.REMAINDER, help="-- bench.MODULE [its args]")
    args = parser.parse_args(argv)
    bench_argv = [a for a in args.module if a != "--"] if args.module else []
    if not bench_argv:
        parser.error("name the benchmark after --, e.g. -- bench.grading --seeds 5")
    runs: dict[str, list[dict[str, list[float]]]] = {"base": [], "head": []}
    OUT.mkdir(parents=True, exist_ok=True)
    with checkout(args.base) as base_tree:
        for i in range(args.rounds):
            for name, tree in (("base", base_tree), ("head", ROOT)):
                print(f"round {i + 1}: {name} ({tree})", file=sys.stderr, flush=True)
                output = run_once(tree, bench_argv)
                (OUT / f"{name}-{i + 1}.txt").write_text(output)
                runs[name].append(ratios(output))
    print(
        f"`python -m {' '.join(bench_argv)}`: base {args.base} vs head, {args.rounds} rounds "
        "each, alternating; median ratio per line"
    )
    print("\n".join(compare(runs)))
    print(f"(each run's full output: {OUT})")


if __name__ == "__main__":
    cli()
