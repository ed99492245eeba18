"""The shipped Prometheus alerting rules, unit-tested with promtool (Debian's `prometheus`
package; `make test` installs it when missing, see the Makefile's `promtool` target)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PROMETHEUS = Path(__file__).resolve().parents[2] / "docker" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(
            "PROMTOOL MISSING: the alerting rules in docker/prometheus/rules.yml are NOT tested. "
            "Install Debian's prometheus package (make test does so when run as root with apt-get)."
        )
    return path


def test_rules__promtool_check__valid(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "check", "rules", "rules.yml"], cwd=PROMETHEUS, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_rules__promtool_test_rules__every_case_passes(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "test", "rules", "rules_test.yml"],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_prometheus_config__promtool_check_config__valid(promtool: str, tmp_path: Path) -> None:
    # The config names /etc/prometheus/rules.yml and a token file written by the compose
    # entrypoint: check a copy that points at the files here.
    config = (PROMETHEUS / "prometheus.yml").read_text()
    token = tmp_path / "metrics_token"
    token.write_text("t")
    config = config.replace("/etc/prometheus/rules.yml", str(PROMETHEUS / "rules.yml"))
    config = config.replace("/tmp/metrics_token", str(token))
    (tmp_path / "prometheus.yml").write_text(config)
    result = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
