"""The transitions tables (scheduler/transitions.md; the dispatcher's in scheduler/jobs.md) and the
modules they describe, kept in step both ways - as the SQL-literals test keeps the states: every
name in a table is a function of its module, and every public function of the module is in the
table or in the "not transitions" sentence beneath it. A planted mismatch fails (issue 20)."""

from __future__ import annotations

import ast
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
    """Functions defined in `module` (through any functools.cache), or, for a package, in one of
    its modules and exported by it - not imported from elsewhere."""
    found = set()
    for name, value in vars(module).items():
        inner = inspect.unwrap(value) if callable(value) else value
        home = getattr(inner, "__module__", "")
        in_package = hasattr(module, "__path__") and home.startswith(module.__name__ + ".")
        ours = home == module.__name__ or in_package
        if inspect.isfunction(inner) and ours and not name.startswith("_"):
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
    jobs_md = JOBS_MD.read_text()
    beside = jobs_md.index("Beside them in the module")
    jobs_text = jobs_md[:beside] + jobs_md[beside:].replace("`job_history_record`", "`job_history_write`", 1)
    assert mismatches(dispatcher_transitions, jobs_text) == [
        "named beside the table, no such function: job_history_write",
        "function missing from the table: job_history_record",
    ]


# -- every write of a job's history is one of the dispatcher room's statements ------------------

ROOM_SQL = ROOT / "scheduler" / "dispatcher" / "jobs.sql"
SKIP_DIRS = {".venv", "tests", "bench", "migrations", "node_modules", "__pycache__", "static", "templates"}
HISTORY_WRITE = re.compile(
    r"(?:INSERT\s+INTO|UPDATE)\s+scheduler_taskexecutionhistory\b(.*?)"
    # ...up to the statement's end: `;`, the end of its CTE, or the next statement.
    r"(?:;|\n\s*\),|\n\s*\n(?=\s*(?:WITH|INSERT|UPDATE|SELECT|DELETE|CREATE|DROP)\b)|\Z)",
    re.S | re.I,
)
HISTORY_MODEL = "TaskExecutionHistory"
MODEL_WRITES = {"create", "bulk_create", "update", "update_or_create", "get_or_create", "bulk_update"}


def project_sources() -> dict[str, str]:
    """The project's own .sql and .py files (not tests, benches, migrations), but the room's SQL."""
    found = {}
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if path.suffix not in {".sql", ".py"} or SKIP_DIRS & set(rel.parts) or path == ROOM_SQL:
            continue
        found[str(rel)] = path.read_text()
    return found


def _mentions_job(node: ast.AST) -> bool:
    """A keyword `job` / `job_id`, or `...Kind.JOB`, anywhere under `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.keyword) and sub.arg in {"job", "job_id"}:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "JOB":
            return True
        if isinstance(sub, ast.Constant) and sub.value == "job":
            return True
    return False


def _names_history_model(node: ast.AST) -> bool:
    return any(
        (isinstance(sub, ast.Name) and sub.id == HISTORY_MODEL)
        or (isinstance(sub, ast.Attribute) and sub.attr == HISTORY_MODEL)
        for sub in ast.walk(node)
    )


def job_history_writers(sources: dict[str, str]) -> list[str]:
    """Writes of a job's history rows outside the room (scheduler/dispatcher/jobs.sql): SQL
    statements (in .sql files or Python strings) that insert or update history rows naming
    `job_id` or the kind 'job', and model writes (the model built, or its manager's create /
    bulk_create / update...) given a job. [] when there is none."""
    found = []
    for name, text in sources.items():
        # SQL comments out (a `;` in one would end a statement early), the lines kept.
        bare = re.sub(r"--[^\n]*", "", text)
        for match in HISTORY_WRITE.finditer(bare):
            if re.search(r"\bjob_id\b|'job'", match.group(1)):
                line = bare.count("\n", 0, match.start()) + 1
                found.append(f"{name}:{line}: SQL writes job history")
        if not name.endswith(".py") or HISTORY_MODEL not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call) or not _names_history_model(node.func):
                continue
            func = node.func
            built = isinstance(func, ast.Name | ast.Attribute) and (
                getattr(func, "id", None) == HISTORY_MODEL or getattr(func, "attr", None) == HISTORY_MODEL
            )
            written = isinstance(func, ast.Attribute) and func.attr in MODEL_WRITES
            if (built or written) and _mentions_job(node):
                found.append(f"{name}:{node.lineno}: {HISTORY_MODEL} written for a job")
    return sorted(set(found))


def test_job_history__written_only_by_the_dispatcher_rooms_statements() -> None:
    sources = project_sources()
    assert "scheduler/sql/functions.sql" in sources and "scheduler/dispatcher/firing.py" in sources

    assert job_history_writers(sources) == []


def test_job_history__a_planted_writer_outside_the_room_fails() -> None:
    room = ROOM_SQL.read_text()
    opened = re.search(r"-- name: job_history_open\n(?:--[^\n]*\n)*(.*?)\n\n", room, re.S)
    closed = re.search(r"-- name: job_history_close\n(?:--[^\n]*\n)*(.*?)\n\n", room, re.S)
    assert opened and closed
    planted = {
        # The room's own statements, copied into the engine's files...
        "scheduler/sql/functions.sql": "CREATE FUNCTION f() AS $$\n" + opened.group(1) + ";\n$$;\n",
        "scheduler/sql/queries.sql": "-- name: x\n" + closed.group(1) + "\n",
        # ...and the ORM, both ways.
        "scheduler/services/x.py": (
            "TaskExecutionHistory.objects.bulk_create(\n"
            "    [TaskExecutionHistory(job_id=1, kind=TaskExecutionHistory.Kind.JOB, status='started')]\n)\n"
        ),
        "supervisor/y.py": "H = 1\nmodels.TaskExecutionHistory.objects.filter(run_id=1).update(job=None)\n",
        # Attempt rows are the engine's: not reported.
        "scheduler/sql/ok.sql": (
            "UPDATE scheduler_taskexecutionhistory SET status = 'x' WHERE kind = 'attempt';\n"
        ),
        "scheduler/services/ok.py": "TaskExecutionHistory.objects.create(run_id=1, kind='operator')\n",
    }

    assert job_history_writers(planted) == [
        "scheduler/services/x.py:1: TaskExecutionHistory written for a job",
        "scheduler/services/x.py:2: TaskExecutionHistory written for a job",
        "scheduler/sql/functions.sql:2: SQL writes job history",
        "scheduler/sql/queries.sql:2: SQL writes job history",
        "supervisor/y.py:2: TaskExecutionHistory written for a job",
    ]
