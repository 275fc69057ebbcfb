from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from questions.bank import read_bank
from questions.services import bank_load, loop_questions_missing


class Command(BaseCommand):
    help = (
        "Validate every bank file, then upsert topics, questions and loops by slug. "
        "Nothing is loaded if any file has an error; nothing is ever deleted."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("files", nargs="*", type=Path, help="default: questions/bank/*.yaml")

    def handle(self, *args, files: list[Path], **options) -> None:
        bank = read_bank(files or None)
        if not bank.errors:  # (several files: read_bank has checked the loops already)
            bank.errors.extend(loop_questions_missing(bank))
        if bank.errors:
            for error in bank.errors:
                self.stderr.write(str(error))
            raise CommandError(
                f"{len(bank.errors)} error(s) in the bank; nothing was loaded. Fix them and rerun."
            )
        counts = bank_load(bank)
        parts = []
        for kind in ("topic", "question", "loop"):
            parts.append(
                f"{kind}s: "
                + ", ".join(
                    f"{counts[f'{kind} {state}']} {state}"
                    for state in ("created", "updated", "unchanged")
                )
            )
        self.stdout.write("Bank loaded. " + "; ".join(parts))
