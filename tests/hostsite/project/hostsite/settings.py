"""Settings of a host site that installs Weave's apps. It never imports `demo.settings`."""

import os

SECRET_KEY = "host-site-test-key"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "hostsite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.Member"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "accounts",
    "alerts",  # its own app labelled "notifications"
    # Weave, as the docs page "Getting started" lists it:
    "django_q",
    "weave",
    "notifications",
    "onboarding",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["HOST_DB_NAME"],
        "HOST": os.environ.get("HOST_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("HOST_DB_PORT", "5432"),
        "USER": os.environ.get("HOST_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("HOST_DB_PASSWORD", ""),
        "CONN_MAX_AGE": 60,
    }
}
Q_CLUSTER = {
    "name": "hostsite",
    "orm": "default",
    "workers": 2,
    "timeout": 120,
    "retry": 300,
    "max_attempts": 3,
    "bulk": 1,
    "queue_limit": 2,
    "poll": 0.2,
    # As the operations docs say: no stored successes, task locks on the database clock.
    "save_limit": -1,
    "broker_class": "weave.broker.DatabaseClockORM",
}
WEAVE = {
    "PUSH_URL": os.environ["HOST_PUSH_URL"],
    "PUSH_TOKEN": "host-token",
    "SUPPLIER_API_URL": os.environ["HOST_SUPPLIER_API_URL"],
}
