"""The settings mypy's django-stubs plugin loads (pyproject.toml, [tool.django-stubs]): the
project's own, with DEBUG on when the environment does not say, so that type-checking needs no
DJANGO_SECRET_KEY (settings refuse the development key with DEBUG off, issue 19). Nothing
runs with these settings."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_DEBUG", "1")

from sasproject.settings import *  # noqa: F403
