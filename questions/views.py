from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from questions.models import Question, Topic


def topic_detail(request: HttpRequest, slug: str) -> HttpResponse:
    topic = get_object_or_404(Topic, slug=slug)
    questions = Question.objects.published().filter(topic=topic)
    return render(request, "questions/topic_detail.html", {"topic": topic, "questions": questions})
