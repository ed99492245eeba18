"""What the deployment tests share: the production env file and a clean subprocess environment."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from sastools.harness import REPO

ENV_EXAMPLE = REPO / "docker" / "production.env.example"
COMPOSE = REPO / "docker" / "compose.yml"


def read_env_file(path: Path) -> dict[str, str]:
    """compose's env_file format as the example uses it: KEY=value lines, `#` comments."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and key == key.strip() and key.isidentifier(), f"{path.name}:{number}: {raw!r}"
        values[key] = value
    return values


def real_secret_key() -> str:
    return secrets.token_urlsafe(50)


def production_env(**overrides: str) -> dict[str, str]:
    """The environment of a production process: nothing from this test session's (no DEBUG, no
    test key, no test settings), the example's values, and `overrides`."""
    base = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "sasproject.settings",
    }
    return {**base, **read_env_file(ENV_EXAMPLE), **overrides}
