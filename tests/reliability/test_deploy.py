"""The deployment files: docker-compose.yml, Dockerfile, .env.example and the production
settings they rely on.

The compose file is parsed (PyYAML) and checked against the code: every service it needs,
the GPU worker only under the `gpu` profile, commands that name real modules, management
commands and Celery queues, healthchecks, and every environment name it or .env.example
uses read by the settings (or by the named program that reads it). The web healthcheck is
run against a real uvicorn in production mode; `check --deploy` runs with the environment
the containers get. `docker compose config` runs where a compose binary exists.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "web", "worker", "gpu-worker")
# Names the compose file or .env.example use that the Django settings do not read, and who
# reads them (each checked below: code names must occur in the code).
READ_ELSEWHERE = {
    "POSTGRES_USER": "postgres image",
    "POSTGRES_PASSWORD": "postgres image",
    "POSTGRES_DB": "postgres image",
    "GPU_TORCH_INDEX_URL": "compose (gpu-worker build arg)",
    "TORCH_VERSION": "compose (build arg)",
    "IMAGE_TAG": "compose (image tag)",
    "WORKER_CONCURRENCY": "compose (worker -c)",
    "WEB_WORKERS": "trainer/management/commands/run_all.py",
    "PORT": "trainer/management/commands/run_all.py",
    "TRAINER_WARM_GRADER": "trainer/asgi.py",
    "RUBRIC_QUANTIZE": "trainer/grading/rubric/encoder.py",
}
# The production environment the containers get (DEBUG=0 is set by the compose file).
PROD_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "trainer.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://trainer.example.com",
    "TRUST_X_FORWARDED_PROTO": "1",
    "SECURE_SSL_REDIRECT": "1",
}
SCRUBBED = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}


def command(service: str) -> list[str]:
    cmd = SERVICES[service]["command"]
    return cmd if isinstance(cmd, list) else cmd.split()


def option(argv: list[str], name: str) -> str:
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} missing from {argv}")


def settings_env_names() -> set[str]:
    """Every environment name trainer/settings.py reads, in development and in production
    mode: the module is executed afresh with os.environ replaced by a recording copy."""
    seen: set[str] = set()

    class Recording(dict):
        def get(self, key, default=None):
            seen.add(key)
            return super().get(key, default)

        def __getitem__(self, key):
            seen.add(key)
            return super().__getitem__(key)

        def __contains__(self, key):
            seen.add(key)
            return super().__contains__(key)

    real = os.environ
    for extra in ({"DEBUG": "1"}, PROD_ENV):
        base = {k: v for k, v in real.items() if k not in SCRUBBED}
        os.environ = Recording({**base, **extra})  # noqa: B003 (restored below)
        try:
            spec = importlib.util.spec_from_file_location(
                "settings_probe", ROOT / "trainer/settings.py"
            )
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        finally:
            os.environ = real  # noqa: B003
    return seen


def env_example_names() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.M))


def compose_names() -> set[str]:
    text = (ROOT / "docker-compose.yml").read_text()
    names = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)", text))
    for service in SERVICES.values():
        names |= set(service.get("environment") or {})
    return names


def production_section() -> str:
    text = (ROOT / "docs/OPERATIONS.md").read_text()
    match = re.search(r"^## Production settings\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert match, "docs/OPERATIONS.md has no '## Production settings' section"
    return match.group(1)


def test_the_services_are_all_there_and_the_gpu_worker_is_optional():
    assert set(SERVICES) >= {"postgres", "redis", "migrate", "web", "worker", "gpu-worker"}
    assert SERVICES["gpu-worker"]["profiles"] == ["gpu"]
    # `docker compose up` on a machine without GPUs starts everything else.
    assert [s for s, spec in SERVICES.items() if spec.get("profiles")] == ["gpu-worker"]
    (device,) = SERVICES["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    for name in ("web", "worker", "migrate"):
        assert "deploy" not in SERVICES[name], f"{name} must not reserve a GPU"


def test_state_lives_in_named_volumes_and_redis_keeps_its_queue():
    declared = set(COMPOSE["volumes"])
    pg_volume = SERVICES["postgres"]["volumes"][0].split(":")
    assert pg_volume[0] in declared and pg_volume[1] == "/var/lib/postgresql/data"
    redis = SERVICES["redis"]
    assert option(redis["command"], "--appendonly") == "yes"
    assert redis["volumes"][0].split(":")[0] in declared
    assert redis["volumes"][0].split(":")[1] == "/data"


def test_healthchecks_and_start_order():
    assert "pg_isready" in " ".join(SERVICES["postgres"]["healthcheck"]["test"])
    assert SERVICES["redis"]["healthcheck"]["test"][-2:] == ["redis-cli", "ping"]
    assert "/healthz" in " ".join(SERVICES["web"]["healthcheck"]["test"])
    for name in ("web", "worker", "gpu-worker"):
        deps = SERVICES[name]["depends_on"]
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
        assert deps["postgres"]["condition"] == deps["redis"]["condition"] == "service_healthy"
    assert SERVICES["migrate"]["restart"] == "no"


def test_commands_name_real_modules_commands_and_queues(monkeypatch):
    from django.core.management import get_commands

    from trainer.celery import app

    web = command("web")
    assert web[:3] == ["python", "-m", "trainer.web"]  # checked in the next test
    assert option(web, "--port") == "8000"
    from trainer import web as launcher

    module, attr = launcher.APP.split(":")
    monkeypatch.setenv("TRAINER_WARM_GRADER", "0")
    assert callable(getattr(importlib.import_module(module), attr))

    migrate = " ".join(command("migrate"))
    used = re.findall(r"python -m manage (\w+)", migrate)
    assert used == ["migrate", "load_bank"]
    assert set(used) <= set(get_commands())

    queues = {q.name for q in app.conf.task_queues}
    consumed = {}
    for name in ("worker", "gpu-worker"):
        argv = command(name)
        assert argv[:4] == ["celery", "-A", "trainer", "worker"], argv
        assert importlib.util.find_spec("trainer.celery") is not None
        consumed[name] = set(option(argv, "-Q").split(","))
        assert consumed[name] <= queues, f"{name} consumes unknown queues"
    assert consumed["worker"] == {"default", "lab-cpu"}
    assert consumed["gpu-worker"] == {"lab-gpu"}
    gpu = command("gpu-worker")
    assert option(gpu, "--pool") == "solo" and option(gpu, "-c") == "1"
    # Every queue a task is routed to has a consumer.
    routed = {app.amqp.router.route({}, t)["queue"].name for t in app.conf.task_routes}
    assert routed | {app.conf.task_default_queue} <= consumed["worker"] | consumed["gpu-worker"]


def procfile_web() -> list[str]:
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    return line.removeprefix("web:").split()


def dockerfile_cmd() -> list[str]:
    import json

    text = (ROOT / "Dockerfile").read_text()
    match = re.search(r"^CMD (\[.*?\])\s*$", text, flags=re.M | re.S)
    return json.loads(match.group(1).replace("\\\n", ""))


def test_every_web_start_takes_proxy_headers_only_from_forwarded_allow_ips(tmp_path):
    """Issue 16, finding 7: compose, the Dockerfile, the Procfile and `make run` start the
    web process through trainer/web.py, which turns proxy headers off unless
    FORWARDED_ALLOW_IPS names the proxies; no deploy file starts uvicorn by itself (uvicorn's
    own default trusts X-Forwarded-For from 127.0.0.1)."""
    from trainer import web
    from trainer.management.commands import run_all

    starts = {"compose": command("web"), "Dockerfile": dockerfile_cmd(), "Procfile": procfile_web()}
    for where, argv in starts.items():
        assert argv[:3] == ["python", "-m", "trainer.web"], (where, argv)
        assert not set(argv) & {"uvicorn", *web.PROXY_OPTIONS}, (where, argv)
    for path in ("docker-compose.yml", "Dockerfile", "Procfile"):
        text = (ROOT / path).read_text()
        assert "trainer.asgi:application" not in text, f"{path} starts uvicorn directly"
    # compose passes the operator's value and defaults to none trusted.
    assert SERVICES["web"]["environment"]["FORWARDED_ALLOW_IPS"] == "${FORWARDED_ALLOW_IPS:-}"
    assert re.search(r"^FORWARDED_ALLOW_IPS=$", (ROOT / ".env.example").read_text(), re.M)
    # What the launcher builds from the setting, as each deploy file runs it (the settings
    # are loaded afresh in a subprocess with the variable set, unset, or wrong).
    probe = (
        "import sys; from trainer import web; from django.conf import settings; "
        "print(' '.join(web.uvicorn_argv(host='h', port=1, workers=1, "
        "forwarded_allow_ips=settings.FORWARDED_ALLOW_IPS)))"
    )

    def launched(value: str | None) -> subprocess.CompletedProcess:
        env = subprocess_env({"DJANGO_SETTINGS_MODULE": "trainer.settings"})
        env.pop("FORWARDED_ALLOW_IPS", None)
        if value is not None:
            env["FORWARDED_ALLOW_IPS"] = value
        return subprocess.run(
            [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
        )

    for value in (None, "", " "):
        argv = launched(value).stdout.split()
        assert "--no-proxy-headers" in argv and "--proxy-headers" not in argv, (value, argv)
    argv = launched("10.0.0.5, 172.16.0.0/12").stdout.split()
    assert "--proxy-headers" in argv and "--no-proxy-headers" not in argv
    assert option(argv, "--forwarded-allow-ips") == "10.0.0.5,172.16.0.0/12"
    bad = launched("proxy.example")
    assert bad.returncode != 0 and "FORWARDED_ALLOW_IPS: 'proxy.example'" in bad.stderr
    # `make run` builds its web command with the same function.
    argv = run_all.web_argv("127.0.0.1", 8000, 2)
    assert argv[1:4] == ["-m", "uvicorn", web.APP]
    assert argv[argv.index(web.APP) + 1 :].count("--no-proxy-headers") == 1
    with pytest.raises(ValueError, match="FORWARDED_ALLOW_IPS"):
        web.uvicorn_argv(
            host="h", port=1, workers=1, forwarded_allow_ips=[], extra=["--proxy-headers"]
        )


def test_every_environment_name_is_read_by_the_settings_or_by_a_named_program():
    read = settings_env_names()
    assert {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "SECURE_HSTS_SECONDS"} <= read
    used = compose_names() | env_example_names()
    unknown = used - read - set(READ_ELSEWHERE)
    assert not unknown, f"names nothing reads: {sorted(unknown)}"
    sources = "\n".join(
        p.read_text()
        for d in ("trainer", "lab", "mock", "questions")
        for p in (ROOT / d).rglob("*.py")
    )
    for name, where in READ_ELSEWHERE.items():
        if where.endswith(".py"):
            assert f'"{name}"' in (ROOT / where).read_text(), f"{where} no longer reads {name}"
            assert f'"{name}"' in sources
        elif where.startswith("compose"):
            assert name in compose_names(), f"{name}: the compose file no longer uses it"


def test_every_setting_is_documented_for_production_and_in_env_example():
    read = settings_env_names() - {"DJANGO_SETTINGS_MODULE"}
    section = production_section()
    undocumented = {name for name in read if f"`{name}`" not in section}
    assert not undocumented, f"missing from OPERATIONS 'Production settings': {undocumented}"
    missing = read - env_example_names() - {"VAR_DIR", "STATIC_ROOT"}
    assert not missing, f"missing from .env.example: {sorted(missing)}"


def test_the_image_is_built_like_the_makefile_says():
    dockerfile = (ROOT / "Dockerfile").read_text()
    makefile = (ROOT / "Makefile").read_text()
    torch = re.search(r"^TORCH_VERSION \?= (\S+)", makefile, flags=re.M).group(1)
    assert f"ARG TORCH_VERSION={torch}" in dockerfile
    assert SERVICES["web"]["build"]["args"]["TORCH_VERSION"] == f"${{TORCH_VERSION:-{torch}}}"
    assert re.search(r"^FROM python:3\.11", dockerfile, flags=re.M)
    assert "HF_HUB_OFFLINE=1" in dockerfile and "TRANSFORMERS_OFFLINE=1" in dockerfile
    assert "collectstatic" in dockerfile
    # torch is installed before the dependencies that would pull another build of it.
    assert dockerfile.index('pip install "torch==') < dockerfile.index("pip install -r")
    assert "TORCH_INDEX_URL" in SERVICES["gpu-worker"]["build"]["args"]


def compose_binary() -> list[str] | None:
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        probe = subprocess.run([*argv, "version"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return argv
    return None


def test_docker_compose_config_accepts_the_file(tmp_path):
    argv = compose_binary()
    if argv is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed here")
    shutil.copy(ROOT / "docker-compose.yml", tmp_path)
    env = "SECRET_KEY=x\nALLOWED_HOSTS=trainer.example.com\nPOSTGRES_PASSWORD=pw\n"
    (tmp_path / ".env").write_text(env)
    for extra in ([], ["--profile", "gpu"]):
        result = subprocess.run(
            [*argv, *extra, "config", "-q"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / ".env").write_text("SECRET_KEY=x\nALLOWED_HOSTS=trainer.example.com\n")
    result = subprocess.run(
        [*argv, "config", "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "set POSTGRES_PASSWORD in .env" in result.stderr


def subprocess_env(extra: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    return {**base, **extra}


def test_check_deploy_is_clean_with_the_container_environment(tmp_path):
    from django.conf import settings
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    # The one silenced check, and only while its reason holds: django-ratelimit warns about
    # any cache backend missing from its list (W001), which predates Django's own Redis
    # cache; the rate-limit cache is that cache (atomic INCR), so E003 stays quiet.
    assert set(settings.SILENCED_SYSTEM_CHECKS) <= {"django_ratelimit.W001"}
    assert isinstance(caches[settings.RATELIMIT_USE_CACHE], RedisCache)
    silenced = len(settings.SILENCED_SYSTEM_CHECKS)
    env = subprocess_env({**PROD_ENV, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"})
    result = subprocess.run(
        [sys.executable, "-m", "manage", "check", "--deploy", "--database", "default",
         "--fail-level", "DEBUG"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"System check identified no issues ({silenced} silenced)." in result.stdout


@contextlib.contextmanager
def production_uvicorn(tmp_path, redis_url: str):
    """The project's ASGI app under a real uvicorn process in production mode; yields the
    environment it runs with and its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = subprocess_env(
        {
            **PROD_ENV,
            "TRUST_X_FORWARDED_PROTO": "0",
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "REDIS_URL": redis_url,
            "TRAINER_WARM_GRADER": "0",
        }
    )
    server = subprocess.Popen(  # as the compose file starts it (trainer/web.py)
        [sys.executable, "-m", "trainer.web", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stdout.read()
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.2)
        yield env, port
    finally:
        server.terminate()
        server.wait(10)


def run_web_healthcheck(env: dict[str, str], port: int) -> subprocess.CompletedProcess:
    """The compose file's web healthcheck, as written, aimed at `port`."""
    test = SERVICES["web"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"], test
    argv = [arg.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for arg in test[2:]]
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)


def test_the_web_healthcheck_passes_then_fails_when_redis_goes(tmp_path):
    """The compose healthcheck against production uvicorn: healthy with its own Redis up;
    Redis stopped → /healthz answers 503 and the check fails (container unhealthy)."""
    import httpx

    from trainer import redis_server

    sock_path = tmp_path / "r.sock"
    redis_process = redis_server.start_embedded(sock_path)
    try:
        with production_uvicorn(tmp_path, f"unix://{sock_path}") as (env, port):
            probe = run_web_healthcheck(env, port)
            assert probe.returncode == 0, probe.stderr
            # Everything but /healthz still redirects to HTTPS; a foreign Host is refused.
            host = {"Host": "trainer.example.com"}
            home = httpx.get(f"http://127.0.0.1:{port}/", headers=host, timeout=30)
            assert home.status_code == 301 and home.headers["location"].startswith("https://")
            bad = httpx.get(
                f"http://127.0.0.1:{port}/healthz", headers={"Host": "evil.example"}, timeout=30
            )
            assert bad.status_code == 400
            redis_server.stop(redis_process, sock_path)
            probe = run_web_healthcheck(env, port)
            assert probe.returncode != 0 and "503" in probe.stderr, probe.stderr
    finally:
        redis_server.stop(redis_process, sock_path)
