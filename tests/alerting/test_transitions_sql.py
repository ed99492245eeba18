"""The alert transitions' SQL (alerting/sql/alerts.sql, issue 27): every literal is one of the
alert's states (Procrastinate's test_enum_synced), every statement the code runs is in the file,
and the announce statement claims exactly what the "announcements due" probe reports."""

from __future__ import annotations

import re

from alerting.models import AlertState
from alerting.transitions import SQL_FILE, queries

# The empty string is announced_state's "nothing announced yet".
STATE_LITERALS = set(AlertState.values) | {""}


def test_alerts_sql__every_literal__an_alert_state() -> None:
    text = re.sub(r"--[^\n]*", "", SQL_FILE.read_text())
    literals = set(re.findall(r"'([^']*)'", text)) - {"{}"}  # '{}'::jsonb: an empty object
    assert literals and literals <= STATE_LITERALS, literals - STATE_LITERALS


def test_alerts_sql__the_statements_the_code_names__all_there() -> None:
    code = (SQL_FILE.parent.parent / "transitions.py").read_text()
    named = set(re.findall(r'queries\(\)\["(\w+)"\]', code))
    assert named and named <= set(queries()), named - set(queries())


def test_alert_announce__claims_what_the_due_probe_reports() -> None:
    def due(text: str) -> str:
        select = text[text.index("SELECT u.id") :]
        return " ".join(select[: select.index("ur.cooldown))") + len("ur.cooldown))")].split())

    assert due(queries()["alert_announce"]) == due(queries()["alert_announcements_due"])
