"""Reads for people choosing what a job runs (forms, the API)."""

from __future__ import annotations

from typing import Any

from .schedulable import schedulable_all


def schedulable_tasks() -> list[dict[str, Any]]:
    """Every task marked `@schedulable`, sorted by name: its workflow name (what a job stores),
    label, description, arguments, the input's JSON Schema and an example input, and whether
    customers may schedule it (`customer_schedulable`; if not, it is staff-only work). Every
    task, for staff and code: a job form offers a user only `workflows_permitted(staff=...)`."""
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
            "input_example": spec.input_example(),
            "customer_schedulable": spec.customer_schedulable,
        }
        for spec in schedulable_all()
    ]


def schedulable_task_choices() -> list[tuple[str, str]]:
    """(workflow name, label) pairs for a form's select."""
    return [(spec.workflow, spec.label) for spec in schedulable_all()]
