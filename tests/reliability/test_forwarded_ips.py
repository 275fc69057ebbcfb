"""X-Forwarded-For is believed only from FORWARDED_ALLOW_IPS (issue 16, finding 7).

A real uvicorn is started with the command line `make run` builds (`run_all.web_argv`) or the
one the Procfile / compose / Dockerfile run (`python -m trainer.web`), on 127.0.0.1, with the
per-address login limit lowered to 3 a day. A client on 127.0.0.1 sends wrong passwords, each
with a different X-Forwarded-For (and username, so only the per-address limit can apply):

- FORWARDED_ALLOW_IPS empty (the default): the header changes nothing; the 4th attempt is a
  429. (Before: uvicorn believed the header from 127.0.0.1, so every attempt came "from" a new
  address and none was ever refused.)
- FORWARDED_ALLOW_IPS=127.0.0.1 (a proxy on this host): the header is the client address, so
  rotating it is not limited, and one forwarded address is refused after 3.
"""

from __future__ import annotations

import re
import sys

import httpx
import pytest

from tests.reliability.procs import Procs, free_port
from trainer.management.commands import run_all

LIMIT = 3


def _web(procs: Procs, argv: list[str]):
    return procs.web(int(argv[argv.index("--port") + 1]), timeout=120, argv=argv)


def _login_statuses(url: str, forwarded_for: list[str]) -> list[int]:
    """One wrong-password login per address, each claiming that X-Forwarded-For."""
    statuses = []
    with httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        for i, address in enumerate(forwarded_for):
            response = client.post(
                "/accounts/login/",
                data={"username": f"nobody-{i}", "password": "wrong", "csrfmiddlewaretoken": token},
                headers={"X-Forwarded-For": address},
            )
            statuses.append(response.status_code)
    return statuses


def _launchers(port: int) -> dict[str, list[str]]:
    return {
        "make run": run_all.web_argv("127.0.0.1", port, 1),
        "Procfile/compose": [
            sys.executable, "-m", "trainer.web", "--host", "127.0.0.1", "--port", str(port),
            "--workers", "1", "--log-level", "warning",
        ],
    }  # fmt: skip


ROTATING = [f"203.0.113.{i}" for i in range(1, 2 * LIMIT + 1)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("launcher", ["make run", "Procfile/compose"])
def test_spoofed_forwarded_for_does_not_escape_the_per_address_limit(
    launcher, redis_url, settings, monkeypatch
):
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    settings.FORWARDED_ALLOW_IPS = []  # the default
    port = free_port()
    argv = _launchers(port)[launcher]
    with Procs(redis_url, RATELIMIT_LOGIN_IP=f"{LIMIT}/d", TRAINER_WARM_GRADER="0") as procs:
        web = _web(procs, argv)
        statuses = _login_statuses(web.info["url"], ROTATING)
    # Every attempt counts against 127.0.0.1, whatever the header says.
    assert statuses == [200] * LIMIT + [429] * LIMIT, statuses


@pytest.mark.django_db(transaction=True)
def test_forwarded_for_is_the_client_when_the_proxy_is_trusted(redis_url, settings, monkeypatch):
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1")
    settings.FORWARDED_ALLOW_IPS = ["127.0.0.1"]  # a proxy on this host
    port = free_port()
    argv = run_all.web_argv("127.0.0.1", port, 1)
    assert "--forwarded-allow-ips=127.0.0.1" in argv
    with Procs(redis_url, RATELIMIT_LOGIN_IP=f"{LIMIT}/d", TRAINER_WARM_GRADER="0") as procs:
        web = _web(procs, argv)
        rotating = _login_statuses(web.info["url"], ROTATING)
        one_client = _login_statuses(web.info["url"], ["198.51.100.7"] * (LIMIT + 1))
    assert rotating == [200] * len(ROTATING), rotating  # each its own address
    assert one_client == [200] * LIMIT + [429], one_client  # keyed on the forwarded address
