"""`python -m manage export_learner_data <username> [--out file.json]`: everything the site
holds about one learner, as JSON (see trainer.learner_data)."""

from __future__ import annotations

import json
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from trainer import learner_data


class Command(BaseCommand):
    help = "Export everything the site holds about one learner as JSON (stdout or --out)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--out", help="Write to this file instead of stdout.")

    def handle(self, *args, username: str, out: str | None, **options) -> None:
        user = find_user(username)
        data = learner_data.export(user)
        text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False)
        if out:
            path = Path(out)
            try:
                path.write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"Cannot write {path}: {exc.strerror}") from exc
            total = sum(data["counts"].values())
            self.stderr.write(f"Wrote {path}: {username}'s account and {total} rows")
        else:
            self.stdout.write(text)


def find_user(username: str):
    try:
        return get_user_model().objects.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"No user named {username!r}.") from None
