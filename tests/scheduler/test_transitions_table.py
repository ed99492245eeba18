"""The transitions tables (scheduler/transitions.md; the dispatcher's in scheduler/jobs.md) and the
modules they describe, kept in step both ways - as the SQL-literals test keeps the states: every
name in a table is a function of its module, and every public function of the module is in the
table or in the "not transitions" sentence beneath it. A planted mismatch fails (issue 20)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

from scheduler import transitions
from scheduler.dispatcher import transitions as dispatcher_transitions

ROOT = Path(__file__).resolve().parents[2]
ENGINE_MD = ROOT / "scheduler" / "transitions.md"
JOBS_MD = ROOT / "scheduler" / "jobs.md"


def table_names(text: str) -> tuple[set[str], set[str]]:
    """(names in the first column of the table headed `| transition`, names in the "Beside them
    in the module, not transitions:" sentence after it)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\|\s*transition\s*\|", line))
    in_table: set[str] = set()
    i = start + 2  # header, rule
    while i < len(lines) and lines[i].startswith("|"):
        cell = lines[i].split("|")[1]
        in_table |= {name.strip() for name in cell.split(",") if name.strip()}
        i += 1
    rest = "\n".join(lines[i:])
    match = re.search(r"Beside them in the module, not transitions:(.*?)(?:\n\n|$)", rest, re.S)
    beside = set(re.findall(r"`(\w+)`", match.group(1))) if match else set()
    return in_table, beside


def public_functions(module: ModuleType) -> set[str]:
    """Functions defined in `module` (through any functools.cache), not imported into it."""
    found = set()
    for name, value in vars(module).items():
        inner = inspect.unwrap(value) if callable(value) else value
        if inspect.isfunction(inner) and inner.__module__ == module.__name__ and not name.startswith("_"):
            found.add(name)
    return found


def mismatches(module: ModuleType, text: str) -> list[str]:
    """What is out of step between the module and its table: [] when none."""
    in_table, beside = table_names(text)
    functions = public_functions(module)
    problems = [f"in the table, no such function: {n}" for n in sorted(in_table - functions)]
    problems += [f"named beside the table, no such function: {n}" for n in sorted(beside - functions)]
    problems += [f"function missing from the table: {n}" for n in sorted(functions - in_table - beside)]
    problems += [f"both in the table and beside it: {n}" for n in sorted(in_table & beside)]
    return problems


@pytest.mark.parametrize(
    ("module", "doc"),
    [(transitions, ENGINE_MD), (dispatcher_transitions, JOBS_MD)],
    ids=["engine", "dispatcher"],
)
def test_transitions_table__in_step_with_the_module_both_ways(module: ModuleType, doc: Path) -> None:
    assert mismatches(module, doc.read_text()) == []


def test_transitions_table__a_planted_mismatch_fails_both_ways() -> None:
    text = ENGINE_MD.read_text()
    gone = re.sub(r"^\| step_advance .*\n", "", text, count=1, flags=re.M)
    ghost = text.replace("| step_stop ", "| step_halt ", 1)
    assert gone != text and ghost != text

    assert mismatches(transitions, gone) == ["function missing from the table: step_advance"]
    assert mismatches(transitions, ghost) == [
        "in the table, no such function: step_halt",
        "function missing from the table: step_stop",
    ]
    jobs_text = JOBS_MD.read_text().replace("`job_history_record`", "`job_history_write`", 1)
    assert mismatches(dispatcher_transitions, jobs_text) == [
        "named beside the table, no such function: job_history_write",
        "function missing from the table: job_history_record",
    ]
