"""Admin inputs for formulas: step and misconception expressions, a problem's condition,
and the JSON that holds expressions (parameters, variables, a rubric point's expects).
They span the form row and use a monospace font, so a long chain of names reads at once."""

from __future__ import annotations

from django import forms

FORMULA_CSS = {"all": ["css/admin-formula.css"]}
# Formulas are not prose: no spellcheck squiggles, no capitalised first letter on phones.
_PLAIN = {"spellcheck": "false", "autocapitalize": "off", "autocomplete": "off"}


class FormulaInput(forms.TextInput):
    """One line: an expression such as `kv_per_token * context / token`."""

    class Media:
        css = FORMULA_CSS

    def __init__(self, attrs: dict | None = None) -> None:
        super().__init__({"class": "formula-input", **_PLAIN, **(attrs or {})})


class FormulaTextarea(forms.Textarea):
    """Several lines of JSON holding expressions (a problem's parameters)."""

    class Media:
        css = FORMULA_CSS

    def __init__(self, attrs: dict | None = None) -> None:
        super().__init__({"class": "formula-input", "rows": 6, **_PLAIN, **(attrs or {})})
