from __future__ import annotations

from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from questions.models import Question, Topic
from trainer.health import health_report


def topics_with_counts(search: str = ""):
    """Topics with the number of published questions, optionally filtered by a search."""
    topics = Topic.objects.annotate(
        question_count=Count("questions", filter=Q(questions__status=Question.Status.PUBLISHED))
    ).order_by("order", "slug")  # Meta.ordering is ignored by aggregate queries
    if search:
        topics = topics.filter(Q(title__icontains=search) | Q(summary__icontains=search))
    return topics


def home(request: HttpRequest) -> HttpResponse:
    search = request.GET.get("q", "").strip()[:100]
    context = {"topics": topics_with_counts(search), "search": search}
    if request.htmx:
        return render(request, "_topic_list.html", context)
    return render(request, "home.html", context)


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("home")
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    report, status = health_report(deep=request.GET.get("deep") == "1")
    return JsonResponse(report, status=status)
