"""`python -m devservices urls` (issue 26, item 7): it printed whatever Flower password, metrics
token and admin password the environment held. Now it prints the demo ones only (the Makefile's
defaults, pinned here) and names the variable for anything else. Run as `make run` runs it: a
subprocess with the environment set."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from sastools.harness import REPO

REAL_FLOWER = "operator:Fl0wer-real-pw-7c1e"
REAL_TOKEN = "metrics-real-token-93b1a0f4"
REAL_ADMIN = "admin-real-pw-55d2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _urls(**env: str) -> str:
    ports = {"WEB_PORT": _free_port(), "FLOWER_PORT": _free_port(), "SIMULATOR_PORT": _free_port()}
    base = {k: v for k, v in os.environ.items() if k not in ("FLOWER_BASIC_AUTH", "SAS_METRICS_TOKEN")}
    result = subprocess.run(
        [sys.executable, "-m", "devservices", "urls"],
        cwd=REPO,
        env={**base, **{k: str(v) for k, v in ports.items()}, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def test_urls__real_credentials__never_printed_the_variable_named() -> None:
    out = _urls(
        FLOWER_BASIC_AUTH=REAL_FLOWER,
        SAS_METRICS_TOKEN=REAL_TOKEN,
        SAS_DEMO="1",
        DEMO_ADMIN_PASSWORD=REAL_ADMIN,
    )

    for secret in ("Fl0wer-real-pw-7c1e", REAL_TOKEN, REAL_ADMIN):
        assert secret not in out, out
    assert "(set in FLOWER_BASIC_AUTH)" in out
    assert "(set in SAS_METRICS_TOKEN)" in out
    assert "(set in DEMO_ADMIN_PASSWORD)" in out


def test_urls__demo_credentials__printed_for_the_developer() -> None:
    out = _urls(FLOWER_BASIC_AUTH="flower:flower-demo", SAS_METRICS_TOKEN="metrics-demo-token", SAS_DEMO="1")

    assert "login: flower / flower-demo" in out
    assert "Bearer metrics-demo-token" in out
    assert "login: admin / admin" in out


def test_urls__none_set__no_login_and_how_to_open_metrics() -> None:
    out = _urls()
    assert "login:" not in out.split("Flower", 1)[1].splitlines()[0]
    assert "(set SAS_METRICS_TOKEN to open it)" in out


@pytest.mark.parametrize(
    ("variable", "constant"),
    [("FLOWER_BASIC_AUTH", "DEMO_FLOWER_BASIC_AUTH"), ("SAS_METRICS_TOKEN", "DEMO_METRICS_TOKEN")],
)
def test_demo_values__are_the_makefiles_defaults(variable: str, constant: str) -> None:
    from devservices import cli

    value = getattr(cli, constant)
    makefile = (REPO / "Makefile").read_text()
    match = re.search(rf"^export {variable} \?= (.*)$", makefile, re.MULTILINE)
    assert match is not None and match.group(1).strip() == value
