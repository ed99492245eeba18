"""One name, one definition (issue 27, item 6): a public function or class is defined once in
product code, so a reader who finds `step_policy` finds the one it is. A failure lists each
name with the modules that define it. Product code as in tests/test_sizes.py."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.test_sizes import ROOT, product_sources

# Names every module of a kind defines by convention: Django's management commands and the
# entry points run with `python -m`.
CONVENTIONAL = {"Command", "main"}
# Twins still to be made one: empty since issue 27's item 6 (the operator's audited actions are
# named `*_by_operator`, `actor_name` is adminkit's); nothing may be added.
ALLOWED: set[str] = set()


def twins() -> dict[str, list[str]]:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path, _, tree in product_sources():
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if not node.name.startswith("_"):
                where[node.name].append(path.relative_to(ROOT).as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_public_names__each_defined_once_in_product_code() -> None:
    found = {name: paths for name, paths in twins().items() if name not in CONVENTIONAL | ALLOWED}
    assert not found, "defined more than once:\n" + "\n".join(
        f"{n}: {', '.join(p)}" for n, p in sorted(found.items())
    )


def test_allowed_twins__still_twins() -> None:
    # An allowed twin that is gone must leave the list (so the list only shrinks).
    assert set(twins()) >= ALLOWED
