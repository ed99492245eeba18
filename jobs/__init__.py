"""Jobs for people: the JSON API, the web pages and the operators' admin of seed 004's jobs.

The jobs themselves - the tables, the cron arithmetic, the services and the dispatcher - are the
engine's (`scheduler/jobs.md`). This app is their face: it parses, calls the scheduler's job
services and selectors (every read scoped by the owner), and shows what they return. It holds no
rule of its own and no model; it sits beside `orders` (neither imports the other) and above the
engine (import-linter contract "layers" in pyproject.toml).

- `api`        /api/jobs/... (DRF, token auth; the preview also takes the session)
- `views`      /jobs/... (the signed-in user's pages)
- `forms`      the job form, shared by the pages and the admin
- `admin`      the Job admin: list, add, edit, pause / resume / run now with a confirmation page
- `errors`     the services' field errors placed on the form's or the serializer's fields
"""
