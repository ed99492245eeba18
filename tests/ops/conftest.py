from __future__ import annotations

# The admin tests' users and clients (an operator with every permission, a customer).
from tests.admin.conftest import customer, operator, staff_client

__all__ = ["customer", "operator", "staff_client"]
