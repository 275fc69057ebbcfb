from pathlib import Path

from django.core.management.base import BaseCommand

from questions.bank import BANK_DIR
from questions.services import bank_export


class Command(BaseCommand):
    help = "Write the database's topics, questions and loops back to bank YAML files."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", type=Path, default=BANK_DIR, help=f"default: {BANK_DIR}")

    def handle(self, *args, out: Path, **options) -> None:
        written = bank_export(out)
        self.stdout.write(f"Wrote {len(written)} file(s) to {out}")
