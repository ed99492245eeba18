"""A `transactional_db` test's flush (pytest-django empties every table after it) does not take
the shipped alert rules away from the tests after it in the same process (tests/conftest.py
`_shipped_rules_after_flush`): without them the engine raises no alert, and a later file's alert
test failed in `make test-fast`. Two tests, in this order (pytest-django keeps the order of
transactional tests): the second starts after the first one's flush."""

from __future__ import annotations

from django_celery_beat.models import PeriodicTask

from alerting.default_rules import default_rules_ensure
from alerting.models import AlertRule
from supervisor.periodic import periodic_tasks_shipped


def _shipped() -> set[str]:
    return set(AlertRule.objects.filter(owner__isnull=True).values_list("kind", flat=True))


def test_first__flushed_after(transactional_db: None) -> None:
    assert _shipped()


def test_second__the_shipped_rules_are_back(transactional_db: None) -> None:
    before = _shipped()
    default_rules_ensure(rule_model=AlertRule)  # adds what is missing, changes nothing else
    assert before and before == _shipped()
    # The engine's beat rows are back too: the session engine's sweeps and dispatcher need them.
    names = {name for name, *_ in periodic_tasks_shipped()}
    assert set(PeriodicTask.objects.filter(name__in=names).values_list("name", flat=True)) == names
