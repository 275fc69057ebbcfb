"""The authors' queue of learners' objections to verdicts: filter by status and question,
accept or reject, and export accepted ones as labelled answers for tests/data/rubric_eval."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpResponse

from trainer import objections
from trainer.models import VerdictObjection


@admin.action(description="Accept selected (the verdict was wrong)")
def accept(modeladmin, request, queryset) -> None:
    changed = queryset.update(status=VerdictObjection.Status.ACCEPTED)
    modeladmin.message_user(request, f"{changed} objection(s) accepted.")


@admin.action(description="Reject selected (the verdict stands)")
def reject(modeladmin, request, queryset) -> None:
    changed = queryset.update(status=VerdictObjection.Status.REJECTED)
    modeladmin.message_user(request, f"{changed} objection(s) rejected.")


@admin.action(description="Export accepted as labelled answers (rubric_eval YAML)")
def export_labelled(modeladmin, request, queryset) -> HttpResponse:
    body = objections.export_yaml(queryset.select_related("attempt__question"))
    response = HttpResponse(body, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="objections-rubric-eval.yaml"'
    return response


@admin.register(VerdictObjection)
class VerdictObjectionAdmin(admin.ModelAdmin):
    list_display = (
        "created",
        "question",
        "point_number",
        "follow_up",
        "verdict",
        "status",
        "staff_label",
    )
    list_filter = ("status", "attempt__question")
    search_fields = ("note", "attempt__answer", "attempt__question__slug")
    actions = [accept, reject, export_labelled]
    readonly_fields = (
        "attempt",
        "follow_up",
        "point_index",
        "verdict",
        "rubric_version",
        "grader_version",
        "note",
        "created",
        "point_text",
        "answer",
    )
    fields = ("status", "staff_label", "correct_verdict", *readonly_fields)

    @admin.display(description="question", ordering="attempt__question__slug")
    def question(self, obj: VerdictObjection) -> str:
        return obj.attempt.question.slug

    @admin.display(description="point #", ordering="point_index")
    def point_number(self, obj: VerdictObjection) -> int:
        return obj.point_index + 1

    @admin.display(description="the point")
    def point_text(self, obj: VerdictObjection) -> str:
        points = (obj.attempt.result or {}).get("points", []) if obj.follow_up is None else []
        match = [p for i, p in enumerate(points) if p.get("index", i) == obj.point_index]
        return match[0].get("text", "") if match else ""

    @admin.display(description="the learner's answer")
    def answer(self, obj: VerdictObjection) -> str:
        if obj.follow_up is None:
            return obj.attempt.answer
        row = obj.attempt.follow_up_responses.filter(index=obj.follow_up).first()
        return row.answer if row else ""

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("attempt__question")

    def has_add_permission(self, request) -> bool:
        return False  # objections come from learners
