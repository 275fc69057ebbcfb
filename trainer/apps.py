from django.apps import AppConfig


class TrainerConfig(AppConfig):
    name = "trainer"
    verbose_name = "Practice"

    def ready(self) -> None:
        from questions.models import Question
        from trainer.grading import arithmetic, registry, rubric

        registry.register(Question.Kind.ARITHMETIC, arithmetic.ArithmeticGrader())
        written = rubric.RubricGrader()
        registry.register(Question.Kind.SCENARIO, written)
        registry.register(Question.Kind.DESIGN, written)
        from trainer import try_rubric

        try_rubric.register_action()
