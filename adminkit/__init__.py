"""The admin's shared kit: display helpers and read-only ModelAdmin bases for every app's admin.

A plain package below every app: it imports Django only, never an app of this project (the
import-linter contracts in pyproject.toml check that), so the engine's admins (scheduler,
supervisor) and the domain's (orders) can all build on it. What is specific to one app stays in
that app's admin: linking to a run and the "may operate runs" permission are the scheduler's
(`scheduler/admin.py`); the engine-health page, which reads every app, is `ops/`.

- `display`  state badges, timestamps, JSON blocks (their CSS is in templates/admin/base_site.html);
- `readonly` ModelAdmin and inline bases for the engine's big, append-mostly tables.
"""
