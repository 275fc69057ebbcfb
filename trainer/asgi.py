"""ASGI entry point (uvicorn): the lab's SSE streams need an async server."""

import os
import threading

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

application = get_asgi_application()


def _warm_grader() -> None:
    # Load the rubric model in the background at start-up, so the first learner to submit
    # does not wait ~8 s for it.
    from trainer.grading import rubric

    rubric.embed(["warm up"])


if os.environ.get("TRAINER_WARM_GRADER", "1") == "1":
    threading.Thread(target=_warm_grader, name="warm-grader", daemon=True).start()
