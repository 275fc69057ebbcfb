from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_GET

from common import ratelimits
from questions.models import Topic, published_q
from trainer import health, progress, services
from trainer.reviews import due_cards


def topics_with_counts(search: str = ""):
    """Topics with the number of published questions, optionally filtered by a search."""
    topics = Topic.objects.annotate(
        question_count=Count("questions", filter=published_q("questions__"))
    ).order_by("order", "slug")  # Meta.ordering is ignored by aggregate queries
    if search:
        topics = topics.filter(Q(title__icontains=search) | Q(summary__icontains=search))
    return topics


def home(request: HttpRequest) -> HttpResponse:
    search = request.GET.get("q", "").strip()[:100]
    topics = list(topics_with_counts(search))
    context = {"topics": topics, "search": search, "due_now": 0}
    if request.user.is_authenticated:
        mine = progress.topic_progress(request.user)
        for topic in topics:
            topic.progress = mine.get(topic.id)
        context["due_now"] = progress.due_count(request.user)
    if request.htmx:
        return render(request, "_topic_list.html", context)
    return render(request, "home.html", context)


_login = auth_views.LoginView.as_view()


def _login_refused(request: HttpRequest) -> HttpResponse | None:
    """Two limits on logging in, per client address and per username; a refused attempt
    gets a 429 before any password is checked."""
    by_ip = ratelimits.hit(request, "login-ip", ratelimits.client_ip)
    by_user = ratelimits.hit(request, "login-user", ratelimits.posted_username)
    limited = by_user or by_ip
    if not limited:
        return None
    context = {
        "form": AuthenticationForm(request, initial={"username": request.POST.get("username")}),
        "next": request.POST.get("next", ""),
        "rate_limited": ratelimits.login_message(limited),
    }
    response = render(request, "registration/login.html", context)
    return ratelimits.with_retry_after(response, limited)


@sensitive_post_parameters()
@never_cache
def login_view(request: HttpRequest) -> HttpResponse:
    """Django's LoginView behind the login limits."""
    if request.method == "POST" and (refused := _login_refused(request)):
        return refused
    return _login(request)


@sensitive_post_parameters()
@never_cache
def admin_login_view(request: HttpRequest) -> HttpResponse:
    """The admin's login page behind the same limits (it is a second way to try passwords)."""
    if request.method == "POST" and (refused := _login_refused(request)):
        return refused
    return admin.site.login(request)


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("home")
    if request.method == "POST":  # counts accounts created, not forms sent back to fix
        limited = ratelimits.full(request, "signup-ip", ratelimits.client_ip)
        if limited:
            form = UserCreationForm(initial={"username": request.POST.get("username")})
            context = {"form": form, "rate_limited": ratelimits.signup_message(limited)}
            response = render(request, "registration/signup.html", context)
            return ratelimits.with_retry_after(response, limited)
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        ratelimits.hit(request, "signup-ip", ratelimits.client_ip)
        login(request, user)
        return redirect("home")
    return render(request, "registration/signup.html", {"form": form})


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Public: status and whether the database and Redis answer (200, or 503 when one is
    down). Staff, or the X-Healthz-Token header: the full report; `?deep=1` adds a task
    round-trip through a worker. Every check is single-flight and bounded (trainer/health)."""
    details = health.may_see_details(request)
    deep = request.GET.get("deep") == "1"
    if deep and not details:
        message = (
            "The deep check (?deep=1) is for staff, or for a request with the "
            f"{health.TOKEN_HEADER} header set to HEALTHZ_TOKEN. Plain /healthz is public."
        )
        return JsonResponse({"error": message}, status=403)
    report, status = health.health_report(details=details, deep=deep)
    return JsonResponse(report, status=status)


@login_required
def practice_start(request: HttpRequest) -> HttpResponse:
    """Start practising: by topic, the most overdue review, or a surprise question."""
    mode = request.GET.get("mode", "surprise")
    question = None
    if mode == "topic":
        topic = get_object_or_404(Topic, slug=request.GET.get("topic", ""))
        question = progress.next_in_topic(request.user, topic)
    elif mode == "due":
        card = due_cards(request.user).first()
        if card is None:
            messages.info(request, "Nothing is due for review. Try a surprise question.")
            return redirect("home")
        attempt = services.attempt_for_review(user=request.user, question=card.question)
        return redirect("attempt", attempt_id=attempt.pk)
    else:
        question = progress.surprise(request.user)
    if question is None:
        messages.info(request, "No published questions yet: load the bank first.")
        return redirect("home")
    return redirect("practice", slug=question.slug)


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links (the admin's pages link none)."""
    response = redirect(static("img/favicon.svg"))
    response["Cache-Control"] = "public, max-age=86400"
    return response


@login_required
def progress_page(request: HttpRequest) -> HttpResponse:
    history = progress.score_history(request.user)
    context = {
        "history": history,
        "competencies": progress.competency_scores(request.user),
        "due_days": progress.reviews_due_by_day(request.user),
        "due_now": progress.due_count(request.user),
        "chart_data": {
            "history": [
                {
                    "when": h["when"].isoformat(),
                    "topic": h["topic"],
                    "score": h["score"],
                    "regraded": h["regraded"],
                }
                for h in history
            ],
            "competencies": progress.competency_scores(request.user),
            "due": [
                {"day": d["day"].isoformat(), "due": d["due"]}
                for d in progress.reviews_due_by_day(request.user)
            ],
        },
    }
    return render(request, "trainer/progress.html", context)
