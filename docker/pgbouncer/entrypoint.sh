#!/bin/sh
# The auth_file docker/pgbouncer/pgbouncer.ini names, from POSTGRES_PASSWORD (the env files, as
# the postgres service's): clients' SCRAM logins are checked against it, and PgBouncer logs in to
# PostgreSQL with it. Refuses to start without one.
set -eu
test -n "${POSTGRES_PASSWORD:-}" || { echo 'POSTGRES_PASSWORD is not set (docker/production.env)' >&2; exit 1; }
umask 077
mkdir -p /tmp/pgbouncer
escaped=$(printf '%s' "$POSTGRES_PASSWORD" | sed 's/"/""/g')
printf '"postgres" "%s"\n' "$escaped" > /tmp/pgbouncer/userlist.txt
exec pgbouncer /etc/pgbouncer/pgbouncer.ini
