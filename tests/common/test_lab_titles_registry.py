"""common.lab_catalog: lab titles by slug for other apps; the lab registers its catalog."""

from __future__ import annotations

from common import lab_catalog
from lab.labs import LABS


def test_the_lab_registers_every_lab_title():
    for slug, lab in LABS.items():
        assert lab_catalog.title(slug) == lab.title
    assert lab_catalog.title("no-such-lab") is None


def test_a_registered_lookup_answers_what_others_do_not():
    def extra(slug):
        return "Extra lab" if slug == "extra" else None

    lab_catalog.register(extra)
    try:
        assert lab_catalog.title("extra") == "Extra lab"
        assert lab_catalog.title(next(iter(LABS))) == next(iter(LABS.values())).title
    finally:
        lab_catalog.unregister(extra)
    assert lab_catalog.title("extra") is None
