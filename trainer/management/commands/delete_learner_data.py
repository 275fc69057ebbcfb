"""`python -m manage delete_learner_data <username> [--yes] [--force]`: delete one learner's
account and everything it owns in one transaction (see trainer.learner_data)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from trainer import learner_data
from trainer.management.commands.export_learner_data import find_user


class Command(BaseCommand):
    help = (
        "Delete a learner's account and all their data (attempts, reviews, lab runs, mock "
        "interviews, sessions, Redis streams) in one transaction. Export first if needed."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        parser.add_argument(
            "--force", action="store_true", help="Also delete a staff or superuser account."
        )

    def handle(self, *args, username: str, yes: bool, force: bool, **options) -> None:
        user = find_user(username)
        if (user.is_staff or user.is_superuser) and not force:
            raise CommandError(
                f"{username!r} is a staff/superuser account; refusing without --force."
            )
        learner_data.ensure_covered()
        if not yes:
            counts = {label: len(objs) for label, objs in learner_data.owned_rows(user).items()}
            self.stdout.write(f"This deletes the account {username!r} and:")
            for label, n in counts.items():
                self.stdout.write(f"  {label}: {n}")
            try:
                answer = input(f"Type the username ({username}) to confirm: ")
            except EOFError:
                answer = ""
            if answer.strip() != username:
                raise CommandError("Not confirmed; nothing was deleted.")
        report = learner_data.delete(user)
        self.stdout.write(f"Deleted {username!r}:")
        for label, n in report.deleted.items():
            self.stdout.write(f"  {label}: {n}")
        for label, n in report.detached.items():
            self.stdout.write(f"  {label}: set to NULL on {n} row(s) of other learners")
        self.stdout.write(f"  sessions: {report.sessions}")
        if report.redis_error:
            self.stderr.write(
                f"  Redis streams not removed ({report.redis_error}); they expire within 24 h."
            )
        else:
            self.stdout.write(f"  redis streams: {report.redis_keys}")
        self.stdout.write(self.style.SUCCESS("Done."))
