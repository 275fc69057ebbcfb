from django.apps import AppConfig


class TrainerConfig(AppConfig):
    name = "trainer"
    verbose_name = "Practice"

    def ready(self) -> None:
        from common import learner_data
        from questions.models import Question
        from trainer import objections
        from trainer.grading import arithmetic, registry, rubric

        registry.register(Question.Kind.ARITHMETIC, arithmetic.ArithmeticGrader())
        written = rubric.RubricGrader()
        registry.register(Question.Kind.SCENARIO, written)
        registry.register(Question.Kind.DESIGN, written)
        learner_data.register(
            "trainer", sections={"verdict_objections": objections.objections_section}
        )
        from trainer import try_rubric

        try_rubric.register_action()
