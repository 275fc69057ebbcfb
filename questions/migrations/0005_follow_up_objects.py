"""Follow-ups become objects: each old plain string s turns into {"prompt": s, "rubric": []}.
Reversing turns objects back into their prompt (their rubric, if any, is dropped)."""

from django.db import migrations


def strings_to_objects(apps, schema_editor) -> None:
    Question = apps.get_model("questions", "Question")
    for question in Question.objects.exclude(follow_ups=[]).only("id", "follow_ups"):
        items = [
            {"prompt": f, "rubric": []} if isinstance(f, str) else f
            for f in question.follow_ups or []
        ]
        if items != question.follow_ups:
            Question.objects.filter(pk=question.pk).update(follow_ups=items)


def objects_to_strings(apps, schema_editor) -> None:
    Question = apps.get_model("questions", "Question")
    for question in Question.objects.exclude(follow_ups=[]).only("id", "follow_ups"):
        prompts = [f["prompt"] if isinstance(f, dict) else f for f in question.follow_ups or []]
        if prompts != question.follow_ups:
            Question.objects.filter(pk=question.pk).update(follow_ups=prompts)


class Migration(migrations.Migration):
    dependencies = [("questions", "0004_rubric_point_metadata")]

    operations = [migrations.RunPython(strings_to_objects, objects_to_strings)]
