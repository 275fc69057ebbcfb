"""`python -m manage regrade [--question SLUG] [--dry-run]`: re-grade stored written answers
with the current grader and report how many scores moved (trainer/regrade.py says what is
kept: answers, self-assessments, review schedules, answered checks)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from questions.models import Question
from trainer.regrade import regradable, regrade


class Command(BaseCommand):
    help = "Re-grade stored scenario/design answers with the current grader; report moved scores."

    def add_arguments(self, parser):
        parser.add_argument("--question", metavar="SLUG", help="only this question's attempts")
        parser.add_argument("--dry-run", action="store_true", help="report only; save nothing")

    def handle(self, *args, question=None, dry_run=False, **options):
        if question and not Question.objects.filter(slug=question).exists():
            raise CommandError(f"No question with slug {question!r}.")
        if (
            question
            and not Question.objects.filter(slug=question, kind__in=["scenario", "design"]).exists()
        ):
            raise CommandError(
                f"{question!r} is not a scenario or design question: nothing to re-grade."
            )
        report = regrade(regradable(question).iterator(), dry_run=dry_run)
        for line in report.lines(dry_run):
            self.stdout.write(line)
        if report.failed:
            raise CommandError(
                f"{len(report.failed)} attempt(s) could not be re-graded (listed above)."
            )
