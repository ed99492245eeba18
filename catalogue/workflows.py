"""The `catalogue.reprice` workflow: one paginated step that reprices every product."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register

REPRICE_WORKFLOW = "catalogue.reprice"
REPRICE_OPERATION = "agents.catalogue.reprice"
MIN_PERCENT = Decimal("-90")
MAX_PERCENT = Decimal("1000")
_PERCENT = re.compile(r"[+-]?[0-9]{1,4}(?:\.[0-9]{1,2})?")


def validate_reprice_input(data: Mapping[str, Any]) -> dict[str, Any]:
    """`percent`: the change, a plain decimal from -90 to 1000 with at most two decimals
    ("5" raises every price by 5 %, "-10" lowers it by 10 %)."""
    unknown = sorted(set(data) - {"percent"})
    errors: dict[str, list[str]] = {}
    if unknown:
        errors["non_field_errors"] = [f"unknown field(s): {', '.join(unknown)}"]
    raw = data.get("percent")
    text = str(raw).strip() if isinstance(raw, str | int) and not isinstance(raw, bool) else ""
    if not _PERCENT.fullmatch(text):
        errors["percent"] = ['must be a number with at most two decimals, such as "5" or "-2.5"']
    elif not MIN_PERCENT <= Decimal(text) <= MAX_PERCENT or Decimal(text) == 0:
        errors["percent"] = [f"must be from {MIN_PERCENT} to {MAX_PERCENT}, and not 0"]
    if errors:
        raise WorkflowInputError(errors)
    return {"percent": str(Decimal(text))}


def _payload(ctx: StepContext) -> dict[str, Any]:
    return {"run_id": ctx.run_id, "percent": ctx.input["percent"]}


def build_reprice_workflow() -> Workflow:
    return Workflow(
        name=REPRICE_WORKFLOW,
        label="Reprice the catalogue",
        description="Change every product's price by a percentage, one page of products at a "
        "time (resumable). The catalogue is shared by every customer: staff work.",
        input_example={"percent": "5"},
        # Staff-only (the default): it writes the catalogue every tenant reads.
        validate=validate_reprice_input,
        steps=[
            StepDef(
                name="reprice_products",
                label="Reprice the products",
                operation=REPRICE_OPERATION,
                page_size=int(settings.SAS["CATALOGUE_PAGE_SIZE"]),
                timeout=settings.SAS["CATALOGUE_PAGE_TIMEOUT"],
                queue_timeout=settings.SAS["CATALOGUE_QUEUE_TIMEOUT"],
                max_failures=3,
                backoff_base=0.2,
                backoff_max=2.0,
                payload=_payload,
            )
        ],
    )


register(build_reprice_workflow())
