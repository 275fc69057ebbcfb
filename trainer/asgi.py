"""ASGI entry point (uvicorn): the lab's SSE streams need an async server."""

import os
import threading

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

application = get_asgi_application()


def _warm_graders() -> None:
    # Load the graders' models (the rubric's sentence encoder) in the background at
    # start-up, so the first learner to submit does not wait ~8 s for it.
    from trainer.grading import registry

    registry.warm_up()


if os.environ.get("TRAINER_WARM_GRADER", "1") == "1":
    threading.Thread(target=_warm_graders, name="warm-grader", daemon=True).start()
