"""`python -m manage grade_answers [FILE|-]`: grade JSON-lines answers with the rubric
grader and write one JSON line each (for authors trying a rubric, and for audits).

Input lines: {"question": "<slug>", "answer": "..."} or {"question_text": "...",
"rubric": [{"text": ..., "claims": [...], "contradictions": [...], "key_terms": [...],
"expects": [...]}], "answer": "..."}. Output: {"question", "score", "points": [{"index",
"text", "verdict", "estimate", "evidence", "reason"}], "red_flags": [...]}; no checks are
answered. A bad line gets {"error": ...} and the command exits non-zero at the end.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError

from trainer.grading.rubric.batch import grade_lines


class Command(BaseCommand):
    help = "Grade JSON-lines answers (FILE, or - for stdin) and print one JSON line each."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", nargs="?", default="-", help="JSON-lines file, or - (stdin)")

    def handle(self, *args, file: str, **options) -> None:
        if file == "-":
            lines = sys.stdin.read().splitlines()
        else:
            try:
                with open(file, encoding="utf-8") as handle:
                    lines = handle.read().splitlines()
            except OSError as exc:
                raise CommandError(f"cannot read {file}: {exc.strerror}") from None
        results = grade_lines(lines)
        for result in results:
            self.stdout.write(json.dumps(result, ensure_ascii=False))
        errors = sum("error" in r for r in results)
        if errors:
            raise CommandError(f"{errors} of {len(results)} lines could not be graded")
