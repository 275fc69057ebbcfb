"""Authoring in the admin: inlines, a live htmx preview, bank-grade validation on save,
and "export selected to YAML". Authors are staff users in the Authors group."""

from __future__ import annotations

import random
import re

import pydantic
from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path

from questions import authoring, authoring_problem, authoring_rubric, problems
from questions import bank as bank_files
from questions.admin_widgets import FormulaInput, FormulaTextarea
from questions.markdown import render_markdown
from questions.models import (
    Loop,
    LoopItem,
    Misconception,
    Problem,
    Question,
    RubricPoint,
    Step,
    Topic,
)


def _yaml_download(body: str, filename: str) -> HttpResponse:
    response = HttpResponse(body, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@admin.action(description="Export selected to YAML (bank format)")
def export_questions_yaml(modeladmin, request, queryset) -> HttpResponse:
    return _yaml_download(
        authoring.questions_yaml(list(queryset.select_related("topic"))), "questions-export.yaml"
    )


@admin.action(description="Export selected to YAML (bank format)")
def export_topics_yaml(modeladmin, request, queryset) -> HttpResponse:
    return _yaml_download(authoring.topics_yaml(list(queryset)), "topics-export.yaml")


class RubricPointInlineFormSet(forms.BaseInlineFormSet):
    """Each point's claims, expects and check get the bank's checks, numbers evaluated
    against the question's variables as edited. (The published-question rule is the bank
    file's: points written here may omit the metadata.)"""

    def clean(self) -> None:
        super().clean()
        scope = authoring_rubric.scope_of(getattr(self.instance, "variables", None) or {})
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or data.get("DELETE") or form.errors:
                continue
            for name in JSON_POINT_FIELDS:  # an emptied box means "none", not NULL
                if data.get(name) is None:
                    setattr(form.instance, name, {} if name == "check_spec" else [])
            point = {name: data.get(name) for name in POINT_FIELDS}
            point["check"] = data.get("check_spec")
            for name, messages in authoring_rubric.rubric_point_errors(point, scope).items():
                form.add_error(name if name in form.fields else None, messages)


JSON_POINT_FIELDS = ("concepts", "claims", "contradictions", "key_terms", "expects", "check_spec")
POINT_FIELDS = (
    "text",
    "weight",
    "concepts",
    "penalty",
    "claims",
    "contradictions",
    "key_terms",
    "expects",
)


class RubricPointForm(forms.ModelForm):
    class Meta:
        model = RubricPoint
        fields = "__all__"  # noqa: DJ007 - the inline's field list decides what shows
        widgets = {"expects": FormulaTextarea(attrs={"rows": 3})}


class RubricPointInline(admin.StackedInline):
    model = RubricPoint
    form = RubricPointForm
    formset = RubricPointInlineFormSet
    extra = 0
    fields = (
        ("order", "weight", "penalty"),
        "text",
        "concepts",
        "claims",
        "contradictions",
        "key_terms",
        "expects",
        "check_spec",
    )


@admin.register(Topic)
class TopicAdmin(admin.ModelAdmin):
    list_display = ("order", "title", "slug")
    list_display_links = ("title",)
    search_fields = ("title", "summary")
    actions = [export_topics_yaml]


class QuestionForm(forms.ModelForm):
    """Sources typed in the admin get the bank file's checks (a linked `url` is a web address)."""

    class Meta:
        model = Question
        fields = "__all__"  # noqa: DJ007 - the admin's own field list decides what shows
        widgets = {"variables": FormulaTextarea()}

    def clean_variables(self) -> dict:
        return authoring_rubric.variables_clean(self.cleaned_data.get("variables"))

    def clean(self) -> dict:
        data = super().clean()
        if "follow_ups" in data and "variables" in data:
            scope = authoring_rubric.scope_of(data["variables"])
            try:
                data["follow_ups"] = authoring_rubric.follow_ups_clean(data["follow_ups"], scope)
            except ValidationError as exc:
                self.add_error("follow_ups", exc)
        return data

    def clean_sources(self) -> list:
        sources = self.cleaned_data.get("sources") or []
        try:
            checked = bank_files.SOURCES.validate_python(sources)
        except pydantic.ValidationError as exc:
            raise ValidationError(
                [
                    f"sources{_loc(e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
                    for e in exc.errors()
                ]
            ) from None
        return [s.model_dump(mode="json", exclude_defaults=True) for s in checked]


def _loc(loc: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f" > {p}" for p in loc)


@admin.register(Question)
class QuestionAdmin(admin.ModelAdmin):
    form = QuestionForm
    list_display = ("title", "slug", "topic", "kind", "difficulty", "status")
    list_filter = ("status", "kind", "difficulty", "topic")
    search_fields = ("title", "slug", "prompt")
    list_select_related = ("topic",)
    inlines = [RubricPointInline]
    actions = [export_questions_yaml]
    change_form_template = "admin/questions/question/change_form.html"

    def get_urls(self):
        preview = self.admin_site.admin_view(self.preview_view)
        return [path("preview/", preview, name="questions_question_preview"), *super().get_urls()]

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The prompt and model answer as typed (not yet saved), and a random variant of
        the saved problem with its reference solution."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        question = None
        if data.get("object_id", "").isdigit():
            question = Question.objects.filter(pk=int(data["object_id"])).first()
        prompt = data.get("prompt", question.prompt if question else "")
        model_answer = data.get("model_answer", question.model_answer if question else "")
        variant = None
        problem = getattr(question, "problem", None) if question else None
        if problem is not None:
            spec = problems.from_dict(authoring.problem_data(problem))
            variant = authoring.variant_preview(spec, random.randrange(2**31))
            prompt = problems.render_text(prompt, variant.scope)  # this variant's numbers
        context = {
            "prompt_html": render_markdown(prompt),
            "model_answer_html": render_markdown(model_answer),
            "question": question,
            "variant": variant,
        }
        return TemplateResponse(request, "questions/admin/preview.html", context)


class StepInlineFormSet(forms.BaseInlineFormSet):
    """Validate the problem as edited: the bank loader's checks on >= 20 variants, each
    error shown on the row (and field) of the step that has it."""

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        rows = [
            form
            for form in sorted(self.forms, key=lambda f: f.cleaned_data.get("order") or 0)
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]
        steps = [_step_data(form) for form in rows]
        whole_problem = []
        for issue in authoring.problem_issues(authoring.problem_data(self.instance, steps)):
            if issue.step is None or issue.step >= len(rows):
                whole_problem.append(str(issue))
            else:
                _add_step_error(rows[issue.step], issue)
        if whole_problem:
            raise ValidationError(whole_problem)


def _step_data(form: forms.ModelForm) -> dict:
    """One inline row as the bank's step mapping (misconceptions as saved: they are edited
    on the step's own page)."""
    data = form.cleaned_data
    saved = list(form.instance.misconceptions.all()) if form.instance.pk else []
    return {
        "name": data["name"],
        "prompt": data["prompt"],
        "expression": data["expression"],
        "unit": data["unit"],
        "rtol": data["rtol"],
        "atol": data["atol"],
        "hints": data.get("hints") or [],
        "explanation": data.get("explanation") or "",
        "integer": data.get("integer") or None,
        "misconceptions": [{"expression": m.expression, "feedback": m.feedback} for m in saved],
    }


def _add_step_error(form: forms.ModelForm, issue: authoring.Issue) -> None:
    if issue.field in form.fields:
        form.add_error(issue.field, issue.message)
    elif issue.field.startswith("misconceptions"):
        form.add_error(
            None,
            f"{issue.field}: {issue.message} (misconceptions are edited on the step's own "
            "page: follow its Change link)",
        )
    else:
        form.add_error(None, f"{issue.field}: {issue.message}" if issue.field else issue.message)


class StepForm(forms.ModelForm):
    class Meta:
        model = Step
        fields = "__all__"  # noqa: DJ007 - the admin's own field list decides what shows
        widgets = {"expression": FormulaInput()}


class StepInline(admin.StackedInline):
    model = Step
    form = StepForm
    formset = StepInlineFormSet
    extra = 0
    fields = (
        "order",
        "name",
        "prompt",
        "expression",
        ("unit", "integer"),
        ("rtol", "atol"),
        "hints",
        "explanation",
    )
    show_change_link = True  # misconceptions are edited on the step's own page


class ProblemForm(forms.ModelForm):
    class Meta:
        model = Problem
        fields = "__all__"  # noqa: DJ007 - the admin's own field list decides what shows
        widgets = {"parameters": FormulaTextarea(), "condition": FormulaInput()}


@admin.register(Problem)
class ProblemAdmin(admin.ModelAdmin):
    form = ProblemForm
    list_display = ("question", "condition")
    search_fields = ("question__title", "question__slug")
    inlines = [StepInline]
    autocomplete_fields = ("question",)
    change_form_template = "admin/questions/problem/change_form.html"

    def get_urls(self):
        preview = self.admin_site.admin_view(self.preview_view)
        return [path("preview/", preview, name="questions_problem_preview"), *super().get_urls()]

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """One variant of the problem as the form holds it now (unsaved edits included),
        worked step by step, and what saving would refuse."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = request.POST if request.method == "POST" else request.GET
        saved = None
        if data.get("object_id", "").isdigit():
            saved = Problem.objects.filter(pk=int(data["object_id"])).first()
        edited = authoring_problem.problem_as_edited(data, saved)
        seed = data.get("preview_seed", "")
        seed = int(seed) if seed.isdigit() and not data.get("redraw") else random.randrange(2**31)
        worked = issues = None
        if not edited.unreadable:
            worked = authoring_problem.work_variant(edited.data, seed)
            issues = authoring.problem_issues(edited.data)
        context = {"edited": edited, "worked": worked, "issues": issues, "seed": seed}
        return TemplateResponse(request, "questions/admin/problem_preview.html", context)


class MisconceptionInlineFormSet(forms.BaseInlineFormSet):
    """A step's misconceptions get the bank's checks, each error on the row that has it."""

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        step = self.instance
        if step.problem_id is None:  # no problem chosen: the step's own form says so (was a 500)
            return
        rows = [f for f in self.forms if f.cleaned_data and not f.cleaned_data.get("DELETE")]
        edited = [
            {"expression": f.cleaned_data["expression"], "feedback": f.cleaned_data["feedback"]}
            for f in rows
        ]
        data = authoring.problem_data(step.problem)
        index = None
        for i, row in enumerate(data["steps"]):
            if row["name"] == step.name:
                row["misconceptions"], index = edited, i
        elsewhere = []
        for issue in authoring.problem_issues(data):
            j = _misconception_index(issue) if issue.step == index else None
            if j is not None and j < len(rows):
                rows[j].add_error("expression", issue.message)
            else:
                elsewhere.append(str(issue))
        if elsewhere:
            raise ValidationError(elsewhere)


def _misconception_index(issue: authoring.Issue) -> int | None:
    """j of an issue on "misconceptions[j] > expression" (the bank's path) or
    "misconceptions > j > ..." (the schema's)."""
    match = re.match(r"misconceptions(?:\[(\d+)\]| > (\d+))", issue.field)
    return int(match.group(1) or match.group(2)) if match else None


class MisconceptionForm(forms.ModelForm):
    class Meta:
        model = Misconception
        fields = "__all__"  # noqa: DJ007 - the inline's field list decides what shows
        widgets = {"expression": FormulaInput()}


class MisconceptionInline(admin.TabularInline):
    model = Misconception
    form = MisconceptionForm
    formset = MisconceptionInlineFormSet
    extra = 0
    fields = ("order", "expression", "feedback")


@admin.register(Step)
class StepAdmin(admin.ModelAdmin):
    form = StepForm
    list_display = ("name", "problem", "unit")
    search_fields = ("name", "problem__question__slug")
    inlines = [MisconceptionInline]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return False  # reached from its problem, not the index


class LoopItemInline(admin.TabularInline):
    model = LoopItem
    extra = 0
    autocomplete_fields = ("question",)


@admin.register(Loop)
class LoopAdmin(admin.ModelAdmin):
    list_display = ("order", "title", "slug")
    list_display_links = ("title",)
    inlines = [LoopItemInline]
