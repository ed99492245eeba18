"""The test process's password hasher (tests/conftest.py `pytest_configure`).

PBKDF2 as Django's own, under its own algorithm name, with few rounds: a hash costs
microseconds instead of 0.4 s on 2 cores, and the hash it writes - `pbkdf2_sha256$1000$...`, the
rounds inside it - is checked by Django's stock PBKDF2PasswordHasher too, so the web and worker
subprocesses of the live and browser tests, which run the project's real settings, sign in the
users the test process made. (MD5, Django's usual advice, is a hasher those processes do not
have: every browser test's sign-in failed.)
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
