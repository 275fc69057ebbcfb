"""How every web process starts: uvicorn serving trainer.asgi:application.

`make run` (run_all) spawns `uvicorn_argv(...)`; the Procfile, docker-compose.yml and the
Dockerfile run `python -m trainer.web --host … --port … --workers …`, which builds the same
command line and execs it. One place decides the proxy-header policy:

- `FORWARDED_ALLOW_IPS` empty (the default): `--no-proxy-headers`. uvicorn believes no
  X-Forwarded-For / X-Forwarded-Proto at all, so the client address (per-address rate limits,
  common/ratelimits.py) is the TCP peer. Without this flag uvicorn trusts those headers from
  127.0.0.1 by default: any local process, or a proxy that passes the header through, could
  pick any address per request and never meet a per-address limit.
- `FORWARDED_ALLOW_IPS=<proxy addresses>`: `--proxy-headers --forwarded-allow-ips=…`, so the
  client and scheme come from those proxies' headers (and only theirs).

Extra arguments after ours go to uvicorn unchanged (e.g. `--log-level warning`), except the
proxy options, which only FORWARDED_ALLOW_IPS sets.
"""

from __future__ import annotations

import argparse
import os
import sys

APP = "trainer.asgi:application"
PROXY_OPTIONS = ("--proxy-headers", "--no-proxy-headers", "--forwarded-allow-ips")


def proxy_args(forwarded_allow_ips: list[str] | tuple[str, ...]) -> list[str]:
    """uvicorn's proxy options for these trusted proxy addresses (none: trust no header)."""
    if not forwarded_allow_ips:
        return ["--no-proxy-headers"]
    return ["--proxy-headers", f"--forwarded-allow-ips={','.join(forwarded_allow_ips)}"]


def uvicorn_argv(
    *,
    host: str,
    port: int,
    workers: int,
    forwarded_allow_ips: list[str] | tuple[str, ...],
    graceful_s: int = 5,
    access_log: bool = True,
    extra: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """The uvicorn command line of a web process."""
    refused = [a for a in extra if a.split("=", 1)[0] in PROXY_OPTIONS]
    if refused:
        raise ValueError(
            f"{' '.join(refused)}: proxy headers are set by FORWARDED_ALLOW_IPS only "
            "(docs/OPERATIONS.md, 'Production settings')"
        )
    argv = [sys.executable, "-m", "uvicorn", APP]
    argv += ["--host", host, "--port", str(port), "--workers", str(max(1, workers))]
    argv += ["--timeout-graceful-shutdown", str(graceful_s)]
    if not access_log:
        argv.append("--no-access-log")
    # uvicorn SIGKILLs a worker that does not answer its health ping in time (5 s by
    # default), dropping every request it is serving. On a saturated machine a busy worker
    # missed it once (bench.web, load average 16 on 2 cores, while the rubric model loaded: a
    # sleeping thread waited up to 1.5 s for the GIL at load 12).
    argv += ["--timeout-worker-healthcheck", "30"]
    argv += proxy_args(forwarded_allow_ips)
    return argv + list(extra)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.web",
        description="Serve the trainer with uvicorn (proxy headers from FORWARDED_ALLOW_IPS).",
    )
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WEB_WORKERS", "2")))
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=5, dest="graceful_s")
    ours, extra = parser.parse_known_args(args)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")
    from django.conf import settings  # the settings validate FORWARDED_ALLOW_IPS

    try:
        argv = uvicorn_argv(
            host=ours.host,
            port=ours.port,
            workers=ours.workers,
            forwarded_allow_ips=settings.FORWARDED_ALLOW_IPS,
            graceful_s=ours.graceful_s,
            extra=extra,
        )
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.flush()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
