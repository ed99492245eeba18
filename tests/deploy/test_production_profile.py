"""The production profile (issue 19): safe by default, `check --deploy` clean under the example
environment, the development key refused, and pages that leak nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from sastools.harness import REPO

from .support import ENV_EXAMPLE, production_env, read_env_file, real_secret_key

SETTINGS = REPO / "sasproject" / "settings"


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy__production_env_example_with_a_real_key__no_warning() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env=production_env(DJANGO_SECRET_KEY=real_secret_key()),
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy__example_as_shipped__refused_for_its_empty_secret_key() -> None:
    result = _manage("check", "--deploy", env=production_env())

    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["manage.py", "check"],
        ["-m", "celery", "-A", "sasproject", "inspect", "ping", "--timeout", "1"],
        ["-m", "gunicorn", "--check-config", "-c", "sasproject/gunicorn.conf.py", "sasproject.wsgi"],
    ],
    ids=["manage.py", "celery", "gunicorn"],
)
def test_start__debug_off_and_the_development_key__refused_with_a_clear_message(command: list[str]) -> None:
    env = production_env(DJANGO_DEBUG="0")
    env.pop("DJANGO_SECRET_KEY")

    result = subprocess.run(
        [sys.executable, *command], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set (or is the development key) and DJANGO_DEBUG is off" in (
        result.stdout + result.stderr
    )


def test_start__debug_on_and_the_development_key__allowed_for_development() -> None:
    env = production_env(DJANGO_DEBUG="1")
    env.pop("DJANGO_SECRET_KEY")

    result = _manage("check", env=env)

    assert result.returncode == 0, result.stderr


def test_debug__unset__off() -> None:
    env = production_env(DJANGO_SECRET_KEY=real_secret_key())
    env.pop("DJANGO_DEBUG")
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DEBUG, settings.SAS_DEMO)"
    )

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.stdout.split() == ["False", "False"], result.stderr


def test_env_example__names_every_production_setting_read_from_the_environment() -> None:
    """Every DJANGO_* variable the settings read is in the example, so an operator sees them all."""
    read = set(
        re.findall(
            r"""(?:env_bool|env_list|env_float|os\.environ\.get)\(\s*"(DJANGO_[A-Z_]+)\"""",
            "\n".join(p.read_text() for p in sorted(SETTINGS.glob("*.py"))),
        )
    )
    listed = set(read_env_file(ENV_EXAMPLE))

    assert len(read) >= 20, read
    # DJANGO_STATIC_ROOT is the image's and the tests' business (the default is the image's path).
    assert read - listed == {"DJANGO_STATIC_ROOT"}


def test_env_example__secrets_empty_and_service_urls_carry_a_password() -> None:
    values = read_env_file(ENV_EXAMPLE)

    for secret in ("DJANGO_SECRET_KEY", "POSTGRES_PASSWORD", "REDIS_PASSWORD", "FLOWER_BASIC_AUTH"):
        assert values[secret] == "", f"{secret} must be set by the operator, not shipped"
    assert urlsplit(values["REDIS_URL"]).password, "Redis requires a password (requirepass)"
    assert urlsplit(values["DATABASE_URL"]).password
    assert values["DJANGO_DEBUG"] == "0" and values["SAS_DEMO"] == "0"


def test_404__debug_off__branded_page_with_no_url_patterns_or_settings(client: Client, settings) -> None:
    settings.DEBUG = False

    response = client.get("/no-such-page/at/all/", HTTP_ACCEPT="text/html")

    body = response.content.decode()
    assert response.status_code == 404
    assert 'id="error-page"' in body and "Page not found" in body
    for leak in ("URLconf", "sasproject.urls", "admin/", "DATABASE_URL", "SECRET", "Traceback"):
        assert leak not in body, leak


def test_500__debug_off__branded_page_that_names_nothing(settings) -> None:
    settings.DEBUG = False

    response = server_error(RequestFactory().get("/orders/1/"))

    body = response.content.decode()
    assert response.status_code == 500
    assert 'id="error-page"' in body and "Something went wrong" in body
    for leak in ("Traceback", "DATABASE_URL", "SECRET", "/orders/1/", "settings"):
        assert leak not in body, leak
