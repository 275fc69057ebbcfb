"""Fuzzing lab parameters: every lab's `Lab.clean` with arbitrary values, types, missing and
extra keys, and the lab form view with generated POST data. The outcome is cleaned params
within bounds (and a prediction that draws) or a clear per-field error; on an error nothing
is created or queued."""

from __future__ import annotations

import math

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from hypothesis import HealthCheck, example, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from lab.labs import LABS, LabParamError
from lab.labs.base import Param
from lab.models import LabRun

CASES = 1000
FUZZ = fuzz_settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLUGS = sorted(LABS)

ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**400), 10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.binary(max_size=4),
    st.sampled_from(["1e3", " 12 ", "0x10", "1_000", "٣", "NaN", "-inf", "true", "on", "3.0"]),
)


def valid_value(p: Param):
    """A value within bounds, as the form sends it (text) or as JSON would (a number)."""
    if p.kind == "choice":
        return st.sampled_from(p.choices)
    if p.kind == "bool":
        return st.one_of(st.booleans(), st.sampled_from(["on", "off", "true", "0"]))
    low, high = p.min if p.min is not None else -1e6, p.max if p.max is not None else 1e6
    if p.kind == "int":
        inside = st.integers(math.ceil(low), math.floor(high))
    else:
        inside = st.floats(low, high)
    return st.one_of(inside, inside.map(str), inside.map(lambda v: f" {v!r}\n"))


def param_value(p: Param):
    """Values aimed at one parameter: in bounds, at and past them, other types, junk."""
    if p.kind == "choice":
        return st.one_of(st.sampled_from(p.choices).map(str.upper), ANY)
    if p.kind == "bool":
        return st.one_of(st.sampled_from(["yes!", "2", "", "None"]), ANY)
    low, high = p.min if p.min is not None else -1e6, p.max if p.max is not None else 1e6
    if p.kind == "int":
        edges = st.sampled_from([int(low) - 1, int(high) + 1, int(low), int(high), low + 0.5])
    else:
        edges = st.sampled_from([low - 1e-9, high * (1 + 1e-9), low, high])
    return st.one_of(edges, edges.map(str), ANY)


@st.composite
def raw_params(draw):
    """(slug, raw mapping): each parameter valid or missing, then 0-3 of them given odd or
    junk values, and sometimes extra keys."""
    lab = LABS[draw(st.sampled_from(SLUGS))]
    raw = {p.name: draw(valid_value(p)) for p in lab.params if draw(st.integers(0, 5))}
    for _ in range(draw(st.integers(0, 3))):
        p = draw(st.sampled_from(lab.params))
        raw[p.name] = draw(param_value(p))
    if draw(st.integers(0, 4)) == 0:
        raw.update(draw(st.dictionaries(st.text(max_size=8), ANY, min_size=1, max_size=2)))
    return lab.slug, raw


def check_cleaned(lab, cleaned: dict) -> None:
    assert set(cleaned) == {p.name for p in lab.params}
    for p in lab.params:
        value = cleaned[p.name]
        if p.kind == "choice":
            assert value in p.choices
        elif p.kind == "bool":
            assert isinstance(value, bool)
        else:
            assert type(value) is (int if p.kind == "int" else float) or (
                p.kind == "float" and type(value) is int and value == p.default
            ), (p.name, value)
            assert math.isfinite(value)
            assert p.min is None or value >= p.min
            assert p.max is None or value <= p.max


def test_every_lab_cleans_or_explains_each_field():
    seen = {"cases": 0, "clean": 0, "refused": 0, "labs": set()}

    @FUZZ
    @given(raw_params())
    # A Python int too large for a float: float() raised OverflowError, not a field error.
    @example(("two-phase", {"max_batch": 10**400}))
    @example(("latency-vs-load", {"max_rate": -(10**400)}))
    def case(item):
        slug, raw = item
        lab = LABS[slug]
        seen["cases"] += 1
        seen["labs"].add(slug)
        try:
            cleaned = lab.clean(raw)
        except LabParamError as exc:
            assert exc.errors
            for name, message in exc.errors.items():
                assert name in raw or name in {p.name for p in lab.params}, name
                assert isinstance(message, str) and message.strip()
            seen["refused"] += 1
            return
        check_cleaned(lab, cleaned)
        assert isinstance(lab.predict(cleaned), list)  # the run page draws it at once
        seen["clean"] += 1

    case()
    print(f"lab params fuzz: { {**seen, 'labs': len(seen['labs'])} }")
    assert seen["cases"] >= CASES and seen["labs"] == set(SLUGS)
    assert seen["clean"] > 100 and seen["refused"] > 100


# --- the lab form view -------------------------------------------------------------------
# A request renders the whole form page (and looks up each lab's questions): fewer cases
# than `Lab.clean` above, which sees every value the view passes on.
VIEW_CASES = 200


def bad_form_value(p: Param):
    odd = param_value(p).filter(lambda v: isinstance(v, str | int | float)).map(str)
    return st.one_of(odd, st.text(max_size=20))


@st.composite
def form_posts(draw):
    """Form data: each field valid or left out, then 0-2 odd values, sometimes extra keys
    and the GPU box."""
    lab = LABS[draw(st.sampled_from(SLUGS))]
    data = {p.name: str(draw(valid_value(p))) for p in lab.params if draw(st.integers(0, 5))}
    for _ in range(draw(st.integers(0, 2))):
        p = draw(st.sampled_from(lab.params))
        data[p.name] = draw(bad_form_value(p))
    if draw(st.integers(0, 4)) == 0:
        data.update(draw(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8))))
    if draw(st.integers(0, 9)) == 0:
        data["gpu"] = "on"
    return lab.slug, data


@pytest.mark.django_db
def test_the_lab_form_starts_a_run_or_explains_and_writes_nothing(
    client, settings, django_capture_on_commit_callbacks, redis_url
):
    settings.REDIS_URL = redis_url  # a run is refused while Redis does not answer
    settings.RATELIMITS = {}  # the limits have their own tests
    settings.LAB_MAX_ACTIVE_RUNS = 10**6
    cache.set("lab:workers", [], 3600)  # no GPU worker: a GPU run is refused at once
    user = get_user_model().objects.create_user("ada", password="kv-heads-not-heads")
    client.force_login(user)
    seen = {"cases": 0, "started": 0, "refused": 0}

    @fuzz_settings(FUZZ, max_examples=VIEW_CASES)
    @given(form_posts())
    def case(item):
        slug, data = item
        seen["cases"] += 1
        before = LabRun.objects.count()
        with django_capture_on_commit_callbacks(execute=False) as enqueued:
            response = client.post(f"/lab/{slug}/", data)
        assert response.status_code in (302, 400), response.content[:300]
        if response.status_code == 302:
            run = LabRun.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
            assert LabRun.objects.count() == before + 1 and len(enqueued) == 1
            check_cleaned(LABS[slug], run.params)
            seen["started"] += 1
        else:
            html = response.content.decode()
            assert LabRun.objects.count() == before and not enqueued  # nothing written/queued
            assert "input-error" in html or 'class="errorlist"' in html, html[:800]
            seen["refused"] += 1

    case()
    print(f"lab form fuzz: {seen}")
    assert seen["cases"] >= VIEW_CASES and seen["started"] > 10 and seen["refused"] > 10
