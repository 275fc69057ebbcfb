from django.apps import AppConfig


def lab_title(slug: str) -> str | None:
    """The lab's title by slug, for pages of other apps (common.lab_catalog)."""
    from lab.labs import LABS  # loads every lab (and torch): only when first asked

    lab = LABS.get(slug)
    return lab.title if lab is not None else None


class LabConfig(AppConfig):
    name = "lab"
    verbose_name = "Live lab"

    def ready(self) -> None:
        from common import lab_catalog, learner_data
        from lab import learner_data as lab_learner_data

        learner_data.register("lab", redis_keys=lab_learner_data.redis_keys)
        lab_catalog.register(lab_title)
