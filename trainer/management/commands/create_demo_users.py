from django.core.management.base import BaseCommand

from trainer.demo import demo_users_ensure


class Command(BaseCommand):
    help = "Create the demo learner and author accounts (idempotent) and print their logins."

    def handle(self, *args, **options) -> None:
        for account in demo_users_ensure():
            self.stdout.write(f"  {account.role:28} {account.username} / {account.password}")
