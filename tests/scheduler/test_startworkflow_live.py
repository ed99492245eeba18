"""`manage.py startworkflow NAME` in a temporary copy of the repository (issue 31, item 2): the
generated apps' own tests and the checks a new package touches (names, sizes, queues, slots,
layering) pass as generated; the Procfile's agents-apps worker is given their queues; the
layering check sees them (an import that breaks a contract fails lint-imports); a NAME it
refuses changes nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sastools.repo_copy import VENV_BIN, repository_copy

LONG = "a_workflow_of_twenty_nine_chr"
NAMES = ("greeting", LONG)
# A pytest session of its own in the copy (its test database made from scratch) on a shared machine.
pytestmark = pytest.mark.timeout(900)


def _run(copy: Path, *args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = repository_copy(tmp_path_factory.mktemp("repo"))
    for name in NAMES:
        made = _run(copy, VENV_BIN / "python", "manage.py", "startworkflow", name)
        assert made.returncode == 0, made.stderr
        assert f"wrote {name}/workflows.py" in made.stdout
    return copy


def test_startworkflow__generated_tests_and_the_checks_a_package_touches__pass(copy: Path) -> None:
    tests = [f"tests/{name}" for name in NAMES] + [
        "tests/test_layering.py",
        "tests/test_names.py",
        "tests/test_sizes.py",
        "tests/ops/test_queues.py::test_sas_queues__every_registered_task_routes_to_a_listed_queue",
        "tests/scheduler/test_bulkheads.py::test_default_slots__are_the_procfile_workers_threads",
    ]

    result = _run(copy, VENV_BIN / "pytest", "-p", "no:cacheprovider", "-q", *tests)

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    # Each app's 7 tests (the bad-input one 5 times) and the checks' own.
    assert " passed" in result.stdout and "failed" not in result.stdout


def test_startworkflow__lint_as_generated(copy: Path) -> None:
    paths = [*NAMES, *(f"tests/{name}" for name in NAMES)]

    check = _run(copy, VENV_BIN / "ruff", "check", *paths)
    formatted = _run(copy, VENV_BIN / "ruff", "format", "--check", *paths)

    assert check.returncode == 0, check.stdout
    assert formatted.returncode == 0, formatted.stdout


def test_startworkflow__agents_apps_worker__serves_the_new_queues(copy: Path) -> None:
    result = _run(copy, VENV_BIN / "python", "manage.py", "worker_queues", "--unserved")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"agent.apps,agent.{LONG},agent.greeting"


def test_startworkflow__layering_check__covers_the_new_app(copy: Path) -> None:
    kept = _run(copy, VENV_BIN / "lint-imports")
    assert kept.returncode == 0, kept.stdout[-3000:]

    # An app importing the operators' tools (the layer above it) breaks the layers contract.
    (copy / "greeting" / "wrong.py").write_text("import ops.roles  # noqa: F401\n")
    try:
        broken = _run(copy, VENV_BIN / "lint-imports")
    finally:
        (copy / "greeting" / "wrong.py").unlink()

    assert broken.returncode != 0
    assert "greeting.wrong -> ops.roles" in broken.stdout


@pytest.mark.parametrize("name", ["greeting", "Bad-Name", "x", "class", "apps", "json", "orders"])
def test_startworkflow__refused_name__clear_error_and_nothing_changed(copy: Path, name: str) -> None:
    before = {
        p: p.read_bytes() for p in (copy / "pyproject.toml", copy / "tests" / "greeting" / "test_greeting.py")
    }
    tree = sorted(p.name for p in copy.iterdir())

    result = _run(copy, VENV_BIN / "python", "manage.py", "startworkflow", name)

    assert result.returncode != 0
    assert "CommandError" in result.stderr and name in result.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in copy.iterdir()) == tree
