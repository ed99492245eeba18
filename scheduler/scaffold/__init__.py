"""`manage.py startworkflow NAME` (issue 31, item 2): a workflow app of its own - the app, its
workflow, one agent operation, its tests - and its place in the layering contracts.

Nothing is registered by editing settings: settings install a top-level package with an apps.py
and a workflows.py (sasproject/workflow_apps.py), its queue and slots follow from its name, and
the Procfile's agents-apps worker serves it (`manage.py worker_queues`). The one text edited is
pyproject.toml's import-linter block, so the layering check covers the new package: its root
package, the domain apps' layer and the contract that keeps the test tools out of the apps.
Bad input changes nothing: every check and the new pyproject text come before the first write.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import tomllib
from pathlib import Path
from string import Template
from typing import Any

from sasproject.workflow_apps import NOT_APPS

TEMPLATES = Path(__file__).resolve().parent
NAME_RULE = re.compile(r"[a-z][a-z0-9_]{1,29}")
# The layer of the domain apps in the "layers" contract, found by a member of it.
DOMAIN_LAYER_MEMBER = "orders"
TOOLING_CONTRACT = "no-tooling-in-apps"
# Names the platform keeps: the agents-apps worker's own queue is agent.apps (agents/queues.py).
RESERVED = frozenset({"apps", "agents", "workflows", "scaffold"})


class ScaffoldError(ValueError):
    """A NAME startworkflow refuses, or a pyproject.toml it cannot extend; nothing was written."""


def workflow_app_files(name: str) -> dict[str, str]:
    """Path (relative to the repository) -> text of each file of the app `name`."""
    words = name.split("_")
    values = {
        "name": name,
        "camel": "".join(w.title() for w in words),
        "upper": name.upper(),
        "label": " ".join(words).capitalize(),
    }
    layout = {
        f"{name}/__init__.py": "app_init.py-tpl",
        f"{name}/apps.py": "app_apps.py-tpl",
        f"{name}/workflows.py": "app_workflows.py-tpl",
        f"{name}/tasks.py": "app_tasks.py-tpl",
        f"tests/{name}/__init__.py": None,
        f"tests/{name}/test_{name}.py": "test_app.py-tpl",
    }
    return {
        path: Template((TEMPLATES / tpl).read_text()).substitute(values) if tpl else ""
        for path, tpl in layout.items()
    }


def workflow_app_name_problem(*, name: str, root: Path, labels: set[str]) -> str | None:
    """Why `name` cannot be a new workflow app under `root` (None: it can). `labels`: the
    installed apps' labels."""
    if not NAME_RULE.fullmatch(name):
        return f"{name!r} is not a name: 2 to 30 lower-case letters, digits or _, starting with a letter"
    if keyword.iskeyword(name) or name in RESERVED or name in NOT_APPS:
        return f"{name!r} is reserved"
    if name in labels:
        return f"an installed app is already labelled {name!r}"
    for path in (root / name, root / "tests" / name):
        if path.exists():
            return f"{path} already exists"
    if importlib.util.find_spec(name) is not None:
        return f"{name!r} would hide the installed Python module of that name"
    return None


def _list_append(text: str, anchor: str, item: str) -> str:
    """`text` with `"item"` appended to the first TOML list after `anchor`."""
    start = text.find(anchor)
    if start < 0:
        raise ScaffoldError(f"pyproject.toml: {anchor!r} not found")
    opening = text.index("[", start + len(anchor))
    closing = text.index("]", opening)
    last_quote = text.rindex('"', opening, closing)
    line_start = text.rindex("\n", 0, last_quote) + 1
    indent = text[line_start : len(text) - len(text[line_start:].lstrip(" "))]
    if text.startswith(",\n", last_quote + 1) and text[line_start : last_quote + 1].strip().count('"') == 2:
        # A list of one item a line: the new one on a line of its own.
        return f'{text[: last_quote + 2]}\n{indent}"{item}",{text[last_quote + 2 :]}'
    return f'{text[: last_quote + 1]}, "{item}"{text[last_quote + 1 :]}'


def pyproject_with_app(text: str, name: str) -> str:
    """pyproject.toml's text with `name` in import-linter's root packages, the domain apps'
    layer and the no-tooling contract's sources; checked by reading it back."""
    config: dict[str, Any] = tomllib.loads(text)["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    domain = next((layer for layer in layers if DOMAIN_LAYER_MEMBER in layer.split(" | ")), None)
    if domain is None or text.count(f'"{domain}"') != 1:
        raise ScaffoldError(
            f"pyproject.toml: the layers contract has no single {DOMAIN_LAYER_MEMBER!r} layer"
        )
    text = text.replace(f'"{domain}"', f'"{domain} | {name}"')
    text = _list_append(text, "root_packages = ", name)
    text = _list_append(text, f'id = "{TOOLING_CONTRACT}"', name)
    found: dict[str, Any] = tomllib.loads(text)["tool"]["importlinter"]
    tooling = next(c for c in found["contracts"] if c["id"] == TOOLING_CONTRACT)
    if name not in found["root_packages"] or name not in tooling["source_modules"]:
        raise ScaffoldError("pyproject.toml: the new package did not land in the contracts")
    return text


def workflow_app_create(*, name: str, root: Path, labels: set[str]) -> list[Path]:
    """Write the app `name` under `root` and extend its pyproject.toml; the paths written.
    Raises ScaffoldError, having written nothing, for a name it refuses."""
    problem = workflow_app_name_problem(name=name, root=root, labels=labels)
    if problem:
        raise ScaffoldError(problem)
    pyproject = root / "pyproject.toml"
    new_pyproject = pyproject_with_app(pyproject.read_text(), name)
    written = []
    for relative, content in workflow_app_files(name).items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    pyproject.write_text(new_pyproject)
    return [*written, pyproject]
