"""The layering check sees every package (issue 31, item 2): import-linter only checks the root
packages pyproject.toml lists, so a package missing from them is outside every contract. A new
workflow app (`manage.py startworkflow`) is added by the command; this fails for any other."""

from __future__ import annotations

import tomllib
from typing import Any

from django.conf import settings

from tests.test_sizes import ROOT


def _importlinter() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return config


def test_root_packages__every_top_level_package_of_the_tree() -> None:
    packages = {
        path.parent.name for path in ROOT.glob("*/__init__.py") if not path.parent.name.startswith(".")
    }

    listed = set(_importlinter()["root_packages"])

    assert packages - listed == set(), "top-level packages the layering check does not see"
    assert listed - packages == set(), "root packages that are not in the tree"


def test_workflow_apps__in_the_domain_layer_and_kept_from_the_tools() -> None:
    contracts = {c["id"]: c for c in _importlinter()["contracts"]}
    layered = {name for layer in contracts["layers"]["layers"] for name in layer.split(" | ")}

    for app in settings.SAS_WORKFLOW_APPS:
        assert app in layered, app
        assert app in contracts["no-tooling-in-apps"]["source_modules"], app
