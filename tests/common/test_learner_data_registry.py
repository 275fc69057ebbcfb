"""common.learner_data: each app's contributor is registered at start-up, and the export and
deletion of a learner call every one of them (trainer never imports the other apps)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from common import learner_data as registry
from trainer import learner_data

pytestmark = pytest.mark.django_db


def test_the_apps_register_their_contributors_in_app_order():
    found = {c.app: c for c in registry.contributors()}
    assert [c.app for c in registry.contributors()] == ["trainer", "lab", "mock"]
    assert list(found["trainer"].sections) == ["verdict_objections"]
    assert found["lab"].redis_keys is not None and not found["lab"].sections
    assert found["mock"].redis_keys is not None
    assert list(found["mock"].sections) == ["scorecards", "interviewer_notes"]


@pytest.fixture
def stand_in():
    """A third app's contributor: records who it was asked about."""
    calls: list[tuple[str, str]] = []

    def keys(user):
        calls.append(("keys", user.username))
        return [f"test:stand-in:{user.pk}"]

    def notes(user):
        calls.append(("section", user.username))
        return {"who": user.username}

    registry.register("stand_in", redis_keys=keys, sections={"stand_in_notes": notes})
    yield calls
    registry.unregister("stand_in")


def test_export_holds_every_registered_section_in_order(stand_in):
    user = get_user_model().objects.create_user("eve", password="prefill-then-decode")
    data = learner_data.export(user)
    assert data["stand_in_notes"] == {"who": "eve"}
    assert data["scorecards"] == [] and data["interviewer_notes"] == []
    keys = list(data)
    assert keys.index("counts") < keys.index("scorecards") < keys.index("interviewer_notes")
    assert keys.index("interviewer_notes") < keys.index("stand_in_notes")
    assert keys.index("stand_in_notes") < keys.index("mentioned_in")
    assert stand_in == [("section", "eve")]


def test_delete_drops_every_registered_redis_key(stand_in, settings, redis_url):
    settings.REDIS_URL = redis_url
    import common.redis

    user = get_user_model().objects.create_user("eve", password="prefill-then-decode")
    key = f"test:stand-in:{user.pk}"
    common.redis.client().set(key, 1)
    report = learner_data.delete(user)
    assert stand_in == [("keys", "eve")]  # asked before the rows went
    assert report.redis_keys == 1 and not common.redis.client().exists(key)


def test_a_section_name_belongs_to_one_app():
    with pytest.raises(ValueError, match=r"\['scorecards'\] already belong to 'mock'"):
        registry.register("other", sections={"scorecards": lambda user: []})
    assert "other" not in {c.app for c in registry.contributors()}


def test_registering_again_replaces_the_apps_contributor(stand_in):
    registry.register("stand_in", sections={"stand_in_notes": lambda user: "again"})
    (mine,) = [c for c in registry.contributors() if c.app == "stand_in"]
    assert mine.redis_keys is None and mine.sections["stand_in_notes"](None) == "again"
