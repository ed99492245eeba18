"""Names people type that reach an e-mail or a header: an alert rule's name (the subject of its
e-mails), a job's name (in its alerts). One rule, asked by the model fields' validators, the
forms, the serializers and the services (issue 26, item 7): no control character - Unicode
categories Cc (C0 and C1 controls, CR, LF, TAB, NUL, DEL) and Cf (format characters: bidi
overrides, zero-width characters, BOM), and the line and paragraph separators U+2028/U+2029.

A CR/LF in a subject makes Django refuse the message (BadHeaderError) and the alert is lost;
the other characters cannot split a header but hide or reorder what an operator reads.

Rows stored before the rule may still hold such a character: what is sent passes through
`control_characters_replaced` (alerting/services.py, the e-mail's subject), so it still goes out.

Here, under every app, because the scheduler (jobs), the supervisor (alert rules) and the apps
above them all ask it (pyproject.toml's layers: sasproject is under none of them).
"""

from __future__ import annotations

import unicodedata

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

CONTROL_CHARACTERS_MESSAGE = (
    "must not contain control characters (line breaks, tabs, NUL, invisible format characters)"
)
_SEPARATORS = frozenset("\u2028\u2029")


def is_control_character(char: str) -> bool:
    return char in _SEPARATORS or unicodedata.category(char) in ("Cc", "Cf")


def control_character_find(text: str) -> str | None:
    """The first control character of `text` (see the module docstring), or None."""
    return next((char for char in text if is_control_character(char)), None)


def control_characters_error(text: str) -> str | None:
    """What is wrong with `text` (the first control character, by code point), or None."""
    char = control_character_find(text)
    return None if char is None else f"{CONTROL_CHARACTERS_MESSAGE}: U+{ord(char):04X} found"


def control_characters_refuse(value: object) -> None:
    """A Django validator (model fields, forms; DRF runs it too): ValidationError naming the
    first control character found."""
    if isinstance(value, str) and (why := control_characters_error(value)) is not None:
        raise ValidationError(why, code="control_character")


def control_characters_replaced(text: str, *, by: str = " ") -> str:
    """`text` with every control character replaced by `by` (a stored name that predates the
    rule, on its way into an e-mail subject)."""
    return "".join(by if is_control_character(char) else char for char in text)


def recipients_validate(value: str) -> None:
    """Comma-separated e-mail addresses (the field `AlertRule.recipients`), each a valid one."""
    for address in (a.strip() for a in value.split(",")):
        if address:
            try:
                validate_email(address)
            except ValidationError:
                raise ValidationError(
                    f"not an e-mail address: {address!r} (comma-separated addresses)", code="invalid"
                ) from None
