"""Size limits of product code (issue 27, item 6): no module over 500 lines, no function over 80.

Product code is every package but tests/, bench/, soak/, chaos/ and migrations. A failure lists
every offender with its size, so a split can be planned from the message alone.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_PRODUCT = {"tests", "bench", "soak", "chaos", "migrations"}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Files allowed over the limits: empty since issue 27's item 6 split the last two
# (scheduler/admin/runs.py, alerting/conditions.py); nothing may be added
# (test_allowed_files__still_over keeps it from going stale).
ALLOWED: set[str] = set()


def product_modules() -> list[Path]:
    """Every module of the top-level packages (never under a dot directory: `.venv`, a symlink to
    the virtualenv, held 5,800 modules that a glob from the root walked on every call)."""
    found = []
    for package in sorted(ROOT.iterdir()):
        if package.name.startswith(".") or not (package / "__init__.py").exists():
            continue
        for path in sorted(package.glob("**/*.py")):
            if not NOT_PRODUCT & set(path.relative_to(ROOT).parts):
                found.append(path)
    return found


@functools.cache
def product_sources() -> tuple[tuple[Path, str, ast.Module], ...]:
    """Each product module with its text and its syntax tree, read and parsed once per test
    process (this file's tests and tests/test_names.py all walk them; the trees are only read)."""
    sources = []
    for path in product_modules():
        text = path.read_text()
        sources.append((path, text, ast.parse(text)))
    return tuple(sources)


def offenders(*, allowed: set[str] = ALLOWED) -> list[str]:
    found = []
    for path, text, tree in product_sources():
        name = path.relative_to(ROOT).as_posix()
        if name in allowed:
            continue
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines (module limit {MAX_MODULE_LINES})")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(
                        f"{name}:{node.lineno} {node.name}(): {length} lines (limit {MAX_FUNCTION_LINES})"
                    )
    return found


def test_product_code__modules_and_functions__stay_under_their_limits() -> None:
    found = offenders()
    assert not found, "over the size limits:\n" + "\n".join(found)


def test_product_modules__are_found() -> None:
    # The walk itself: a test that finds no module would pass on any tree.
    names = {p.relative_to(ROOT).as_posix() for p in product_modules()}
    assert {"scheduler/transitions/steps.py", "sasproject/urls.py", "agents/base.py"} <= names
    assert not any(
        n.startswith(("tests/", "bench/", "soak/", "chaos/")) or "/migrations/" in n for n in names
    )


def test_allowed_files__still_over() -> None:
    # An allowed file that is split must leave the list (so the list only shrinks).
    over = {line.split(":")[0] for line in offenders(allowed=set())}
    assert over >= ALLOWED
