from django import template

register = template.Library()


@register.filter
def clock(seconds) -> str:
    """Seconds as m:ss (h:mm:ss from an hour), rounded up: 0.2 s left still shows 0:01."""
    total = max(0, int(-(-float(seconds or 0) // 1)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@register.filter
def tenths(score) -> str:
    """A 0..1 score as 0–10 with one decimal; '—' when there is none."""
    return "—" if score is None else f"{round(float(score) * 10, 1)}"


@register.filter
def lookup(mapping, key):
    return (mapping or {}).get(key)
