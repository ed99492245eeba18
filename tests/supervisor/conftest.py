from __future__ import annotations

import pytest

from tests.engine_workflow import register_engine_workflow


@pytest.fixture(autouse=True)
def _engine_workflow():
    register_engine_workflow()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create(username="bob")
