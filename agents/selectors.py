"""Reads for people choosing what a job runs (forms, the API)."""

from __future__ import annotations

from typing import Any

from .schedulable import schedulable_all


def schedulable_tasks() -> list[dict[str, Any]]:
    """Every task marked `@schedulable`, sorted by name: its workflow name (what a job stores),
    label, description, arguments and the input's JSON Schema. Not per user: the project's
    code decides what is schedulable, for everyone."""
    return [
        {
            "name": spec.name,
            "workflow": spec.workflow,
            "label": spec.label,
            "description": spec.description,
            "parameters": [
                {
                    "name": p.name,
                    "kind": p.kind,
                    "required": p.required,
                    "default": p.default,
                    "type": p.type,
                    "nullable": p.nullable,
                }
                for p in spec.parameters
            ],
            "accepts_extra_args": spec.extra_args,
            "accepts_extra_kwargs": spec.extra_kwargs,
            "input_schema": spec.input_schema(),
        }
        for spec in schedulable_all()
    ]


def schedulable_task_choices() -> list[tuple[str, str]]:
    """(workflow name, label) pairs for a form's select."""
    return [(spec.workflow, spec.label) for spec in schedulable_all()]
