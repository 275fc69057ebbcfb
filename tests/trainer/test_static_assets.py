"""The vendored front-end files: the small plotly bundle draws every trace type our charts
use, their compressed twins are current, and they go out compressed in development mode (what
`make run` serves: WhiteNoise reading static/ through the finders)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import brotli
import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "static" / "vendor"
BASIC_TRACES = {"scatter", "bar", "pie"}  # plotly.js's basic bundle (its README)
# `type` values that name no trace: error bars (error_y.type) and axes (xaxis.type).
NOT_TRACE_TYPES = {"data", "percent", "constant", "sqrt", "linear", "log", "date", "category"}


def test_the_plotly_bundle_is_the_basic_one_and_draws_every_trace_type_we_use():
    bundle = (VENDOR / "plotly-basic.min.js").read_text()[:200]
    assert "plotly.js (basic - minified)" in bundle
    assert not (VENDOR / "plotly.min.js").exists()  # the 4.8 MB full bundle is gone
    used = set()
    for script in (ROOT / "static" / "js").glob("*.js"):
        used |= set(re.findall(r'type:\s*"([a-z0-9]+)"', script.read_text()))
    used -= NOT_TRACE_TYPES
    assert used and used <= BASIC_TRACES, used - BASIC_TRACES
    pages = "".join(p.read_text() for p in (ROOT / "templates").rglob("*.html"))
    assert "vendor/plotly.min.js" not in pages


@pytest.mark.parametrize("name", ["plotly-basic.min.js", "htmx.min.js", "htmx-ext-sse.min.js"])
def test_the_compressed_twins_are_the_file(name):
    data = (VENDOR / name).read_bytes()
    assert gzip.decompress((VENDOR / f"{name}.gz").read_bytes()) == data, "run `make vendor`"
    assert brotli.decompress((VENDOR / f"{name}.br").read_bytes()) == data, "run `make vendor`"


@pytest.mark.parametrize(
    ("accept", "encoding"), [("gzip, deflate, br", "br"), ("gzip", "gzip"), ("", None)]
)
def test_development_mode_serves_the_charts_compressed(client, accept, encoding):
    assert settings.WHITENOISE_USE_FINDERS  # the mode `make run` uses (no collectstatic)
    response = client.get("/static/vendor/plotly-basic.min.js", HTTP_ACCEPT_ENCODING=accept)
    assert response.status_code == 200
    assert response.get("Content-Encoding") == encoding
    body = b"".join(response.streaming_content)
    size = VENDOR / ("plotly-basic.min.js" + {"br": ".br", "gzip": ".gz", None: ""}[encoding])
    assert len(body) == size.stat().st_size
    assert "Accept-Encoding" in response.get("Vary", "")
