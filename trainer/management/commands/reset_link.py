"""`python -m manage reset_link <username> [--base-url URL]`: print a password-reset link
for a learner who has no email address (or cannot reach it), to hand over by another way.

The link is Django's reset token (the same as the emailed one): it works once (it is tied
to the password hash and the last login, so setting the password spends it) and for
PASSWORD_RESET_TIMEOUT (1 hour here). The base of the link is SITE_URL unless --base-url.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core.management.base import BaseCommand, CommandError
from django.urls import reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from trainer.account_views import reset_link_lifetime
from trainer.management.commands.export_learner_data import find_user

BASE_URL_RE = re.compile(r"^https?://[^/\s]+(/\S*)?$")


class Command(BaseCommand):
    help = (
        "Print a one-time password-reset link for a user (valid for PASSWORD_RESET_TIMEOUT, "
        "1 hour; it stops working once the password is set). Hand it to them privately."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--base-url",
            default=None,
            help=f"Start of the link, e.g. https://trainer.example.com (default: SITE_URL, "
            f"now {settings.SITE_URL}).",
        )

    def handle(self, *args, username: str, base_url: str | None, **options) -> None:
        base = (base_url or settings.SITE_URL).rstrip("/")
        if not BASE_URL_RE.match(base):
            raise CommandError(
                f"--base-url {base!r} is not a URL: give http(s)://host[:port][/path]."
            )
        user = find_user(get_user_model().normalize_username(username))
        if not user.is_active:
            raise CommandError(f"{user.get_username()!r} is deactivated; a reset would not help.")
        uid = urlsafe_base64_encode(force_bytes(user.pk))
        token = default_token_generator.make_token(user)
        path = reverse("password_reset_confirm", kwargs={"uidb64": uid, "token": token})
        until = timezone.now() + timedelta(seconds=settings.PASSWORD_RESET_TIMEOUT)
        self.stdout.write(f"{base}{path}")
        self.stderr.write(
            f"Reset link for {user.get_username()!r}: works once, for {reset_link_lifetime()} "
            f"(until {until:%Y-%m-%d %H:%M} UTC). Give it to them privately."
        )
