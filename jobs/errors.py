"""The job services' field errors, placed where people and programs look for them.

`job_create` / `job_update` raise `WorkflowInputError` with one flat map, field -> messages: the
job's own fields (`cron`, `timezone`, `max_retry`, ...) and whatever the chosen workflow's
validation said about its input (`amount`, `url`, ... - or `input.amount`, or `input`). Forms and
serializers show a job field's messages on that field; every other key is about the workflow
input, and is shown on `input`, per key.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

# Service keyword -> the field name the API and the forms use for it.
SERVICE_TO_FIELD = {"timezone_name": "timezone"}
FIELD_TO_SERVICE = {field: kwarg for kwarg, field in SERVICE_TO_FIELD.items()}

INPUT = "input"


def split_errors(
    errors: Mapping[str, list[str]], job_fields: Collection[str]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(errors of the job's fields, errors of the workflow input by the input's own keys).
    Messages about the input as a whole (key `input`, or the workflow's `non_field_errors`) are
    under "" in the second map."""
    own: dict[str, list[str]] = {}
    about_input: dict[str, list[str]] = {}
    for key, messages in errors.items():
        field = SERVICE_TO_FIELD.get(key, key)
        if field == INPUT:
            about_input.setdefault("", []).extend(messages)
        elif field.startswith(INPUT + "."):
            about_input.setdefault(field[len(INPUT) + 1 :], []).extend(messages)
        elif field in ("__all__", "non_field_errors"):
            # The job service has no errors of the whole; a workflow's validator does (an
            # unknown input field, say), and the service passes them on as they are.
            about_input.setdefault("", []).extend(messages)
        elif field in job_fields and field != INPUT:
            own.setdefault(field, []).extend(messages)
        else:
            about_input.setdefault(field, []).extend(messages)
    return own, about_input


def input_messages(about_input: Mapping[str, list[str]]) -> list[str]:
    """The workflow input's errors as lines for one form field: "amount: must be positive"."""
    return [f"{key}: {message}" if key else message for key, msgs in about_input.items() for message in msgs]
