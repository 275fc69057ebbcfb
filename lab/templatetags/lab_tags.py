from django import template

from lab.labs import LABS

register = template.Library()


@register.inclusion_tag("lab/_lab_links.html")
def lab_links(question):
    """'Measure it in the lab' links for a question's related labs (known labs only)."""
    labs = [LABS[slug] for slug in (question.related_labs or ()) if slug in LABS]
    return {"labs": labs}
