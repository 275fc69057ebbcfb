"""`python -m manage export_objections [--out FILE] [--question SLUG]`: accepted learner
objections as labelled answers in the tests/data/rubric_eval format (stdout by default)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from trainer.models import VerdictObjection
from trainer.objections import export_yaml


class Command(BaseCommand):
    help = "Write accepted verdict objections as labelled answers (rubric_eval YAML)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", type=Path, help="File to write (default: stdout).")
        parser.add_argument("--question", help="Only this question's slug.")

    def handle(self, *args, out: Path | None = None, question: str | None = None, **options):
        rows = VerdictObjection.objects.filter(
            status=VerdictObjection.Status.ACCEPTED, follow_up__isnull=True
        ).select_related("attempt__question")
        if question:
            rows = rows.filter(attempt__question__slug=question)
        body = export_yaml(rows.order_by("created"))
        if out is None:
            self.stdout.write(body, ending="")
        else:
            out.write_text(body, encoding="utf-8")
            self.stderr.write(f"Wrote {rows.count()} objection(s) to {out}.")
