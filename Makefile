# Developer entry points: `make run` starts everything, `make test` is what CI runs (.ci/run).
# Every target installs what it needs first; PostgreSQL and Redis come from
# `python -m devservices env` (the machine's, or embedded ones under .devdata/).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements.txt requirements-dev.txt requirements-embedded.txt

export WEB_PORT ?= 8000
export FLOWER_PORT ?= 5555
export SIMULATOR_PORT ?= 8055
export SIMULATOR_URL ?= http://127.0.0.1:$(SIMULATOR_PORT)
# Demo credentials for `make run` (printed with the URLs); set your own in the environment.
# Flower's login (its --basic_auth) and the bearer token /metrics asks for.
export FLOWER_BASIC_AUTH ?= flower:flower-demo
export SAS_METRICS_TOKEN ?= metrics-demo-token
export PYTHONUNBUFFERED := 1
# Procfile commands (python, celery) resolve to the virtualenv.
export PATH := $(abspath $(VENV))/bin:$(PATH)

PYTEST_ARGS ?=
# Three pytest-xdist processes, a test file per process at a time (module fixtures stay whole).
# Each process has its own test database, Redis key prefix and simulator (tests/envsetup.py).
# Three on 2 cores: the longest live tests mostly wait (a service down for two minutes, a pause
# held for 50 s) while their workers idle, and a third process runs other files meanwhile
# (2026-11-29, the whole suite on 2 cores: -n 2 1,058-1,352 s, -n 3 707 s).
# PYTEST_XDIST= runs the suite in one process.
PYTEST_XDIST ?= -n 3 --dist loadfile
BENCH_ARGS ?=
# The chaos soak (issue 22, soak/): `make soak` runs MINUTES (30) of load and faults on servers of
# its own, then drains and checks; `make test` runs a TEST_SOAK_MINUTES (2) one after pytest
# (TEST_SOAK_MINUTES=0 leaves it out). BROKER=rabbitmq runs it on a private RabbitMQ node.
MINUTES ?= 30
BROKER ?= redis
SEED ?= 1
SOAK_ARGS ?=
TEST_SOAK_MINUTES ?= 2

# Exports DATABASE_URL / REDIS_URL into the recipe's shell. The assignment fails the recipe
# (set -e) when devservices fails; a bare `eval "$(...)"` would not.
define DEVSERVICES_ENV
devservices_env="$$($(PY) -m devservices env)"
eval "$$devservices_env"
endef

# pytest, with "no tests collected" (exit 5) turned into a failure.
define PYTEST
set +e
$(VENV)/bin/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)
code=$$?
set -e
if [ "$$code" -eq 5 ]; then
	echo "error: pytest collected no tests (exit 5); treating that as a failure" >&2
	exit 1
fi
exit "$$code"
endef

.PHONY: help venv install run test test-pooler test-fast lint format chromium promtool nginx pgbouncer bench soak services-status stop-services clean-devdata

help:
	@echo "make run            install, start PostgreSQL/Redis if needed, migrate, demo_setup, honcho start (DEBUG on, demo mode, code reload; SAS_RELOAD=0: off)"
	echo "make test           install, lint (ruff, mypy, lint-imports) and pytest -- what CI runs"
	echo "make lint           ruff check, ruff format --check, mypy, lint-imports"
	echo "make test-pooler    pytest, the engine's subset with every worker going through PgBouncer (transaction mode)"
	echo "make test-fast      pytest, the database-only tier: no live, browser or deploy test (PYTEST_ARGS='-k foo' to narrow)"
	echo "make format         ruff format + ruff check --fix"
	echo "make bench          python bench/run_all.py (BENCH_ARGS=...)"
	echo "make soak           chaos soak: MINUTES=30 of load + seeded faults, then drain and check (BROKER=rabbitmq, SEED=N)"
	echo "make venv           create $(VENV) and install requirements (only when they changed)"
	echo "make services-status / stop-services / clean-devdata   embedded PostgreSQL/Redis"

# ---------------------------------------------------------------------------------------------
# Virtualenv. The stamp is newer than the requirement files once they are installed, so pip
# only runs again when one of them changes.
# ---------------------------------------------------------------------------------------------
$(PY):
	@py=""
	for candidate in python3.11 python3; do
		if command -v "$$candidate" >/dev/null 2>&1 \
			&& "$$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
			py="$$candidate"
			break
		fi
	done
	if [ -z "$$py" ]; then
		echo "error: Python 3.11 is required (python3.11, or python3 that is 3.11)" >&2
		exit 1
	fi
	echo "creating $(VENV) with $$(command -v "$$py") ($$("$$py" --version))"
	if ! "$$py" -m venv "$(VENV)"; then
		echo "error: '$$py -m venv' failed (on Debian/Ubuntu: apt-get install python3.11-venv)" >&2
		rm -rf "$(VENV)"
		exit 1
	fi

$(STAMP): $(REQUIREMENTS) | $(PY)
	@if ! $(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
		echo "error: $(VENV) is not Python 3.11; remove it (rm -rf $(VENV)) and run make again" >&2
		exit 1
	fi
	echo "installing requirements into $(VENV)"
	$(PY) -m pip install --disable-pip-version-check --quiet \
		-r requirements-dev.txt -r requirements-embedded.txt
	touch "$@"

venv install: $(STAMP)

# ---------------------------------------------------------------------------------------------
# Run everything
# ---------------------------------------------------------------------------------------------
run: $(STAMP)
	@$(DEVSERVICES_ENV)
	# The development profile (issue 19): DEBUG on for the web and beat (the Procfile turns it
	# off for the workers), and demo mode, in which demo_setup creates the demo admin login.
	# Nothing else sets these: settings default to DEBUG off, no demo admin.
	export DJANGO_DEBUG="$${DJANGO_DEBUG:-1}" SAS_DEMO=1
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo_setup
	# The paginated-reprice demo's 100,000 products (once; a second or so).
	$(PY) manage.py catalogue_seed --if-empty
	# The URLs and demo login; the Procfile's `urls` prints them again once the ports answer.
	$(PY) -m devservices urls
	# Alert e-mails go to files (Django's file backend), one per message, in .devdata/mail.
	export EMAIL_BACKEND="$${EMAIL_BACKEND:-django.core.mail.backends.filebased.EmailBackend}"
	export EMAIL_FILE_PATH="$${EMAIL_FILE_PATH:-$(CURDIR)/.devdata/mail}"
	mkdir -p "$$EMAIL_FILE_PATH"; echo "alert e-mails: $$EMAIL_FILE_PATH (EMAIL_BACKEND=$$EMAIL_BACKEND)"
	# Code reload (issue 31): the web, the workers and beat restart when a .py file of the
	# project changes (devservices/reload.py runs them under watchfiles). SAS_RELOAD=0: the
	# plain Procfile (restart one process by hand: docs/developing/README.md, "Reloading").
	procfile=Procfile
	if [ "$${SAS_RELOAD:-1}" != 0 ]; then
		procfile=.devdata/Procfile.reload
		$(PY) -m devservices.reload Procfile > "$$procfile"
		echo "code reload on: a changed .py file restarts web, workers and beat (SAS_RELOAD=0 make run: off)"
	fi
	# Ctrl-C reaches honcho, which stops every process and exits 130: that is a clean stop.
	code=0; $(VENV)/bin/honcho start -f "$$procfile" -d . || code=$$?
	if [ "$$code" -eq 130 ]; then echo "stopped (Ctrl-C)"; exit 0; fi
	exit "$$code"

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
test: $(STAMP) chromium promtool nginx pgbouncer
	@$(DEVSERVICES_ENV)
	echo "== ruff check"
	$(VENV)/bin/ruff check .
	echo "== ruff format --check"
	$(VENV)/bin/ruff format --check .
	echo "== mypy"
	$(VENV)/bin/mypy .
	echo "== lint-imports (the layering contracts in pyproject.toml)"
	$(VENV)/bin/lint-imports
	# The subset through PgBouncer runs beside the whole suite (one process; its output after
	# the suite's): both mostly wait on their workers, and in sequence they took 2 minutes more.
	pooler_log="$$(mktemp)"
	( POOLER_XDIST="-n 1"; $(POOLER_PYTEST) ) > "$$pooler_log" 2>&1 & pooler_pid=$$!
	echo "== pytest"
	code=0; ( $(PYTEST) ) || code=$$?
	pooler_code=0; wait "$$pooler_pid" || pooler_code=$$?
	echo "== pytest through PgBouncer (the test-pooler subset, run beside the suite)"
	cat "$$pooler_log"; rm -f "$$pooler_log"
	if [ "$$code" -ne 0 ] || [ "$$pooler_code" -ne 0 ]; then exit 1; fi
	if [ "$(TEST_SOAK_MINUTES)" != 0 ]; then
		echo "== chaos soak ($(TEST_SOAK_MINUTES) minutes; soak/)"
		$(PY) -m soak --minutes $(TEST_SOAK_MINUTES) --broker $(BROKER) --seed $(SEED) $(SOAK_ARGS)
	fi

# The subset marked `pooler` (tests/conftest.py, POOLER_SUBSET: orders through the agents, the
# supervisor's sweep, the jobs dispatcher, quotas, concurrency keys, the alert evaluator's lock)
# with every worker, beat and dispatcher of the session going through PgBouncer in transaction
# mode (SAS_TEST_POOLER=1; issue 29 item 4, docs/deploying/deploy.md "Through a pooler").
define POOLER_PYTEST
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
	echo "warning: no pgbouncer (make pgbouncer, as root): the tests through a pooler did not run" >&2
	exit 0
fi
export SAS_TEST_POOLER=1
set +e
$(VENV)/bin/pytest $${POOLER_XDIST:--n 2 --dist loadfile} -m pooler $(PYTEST_ARGS)
code=$$?
set -e
if [ "$$code" -eq 5 ]; then
	echo "error: pytest collected no pooler tests (exit 5); treating that as a failure" >&2
	exit 1
fi
exit "$$code"
endef

test-pooler: $(STAMP) pgbouncer
	@$(DEVSERVICES_ENV)
	began=$$(date +%s)
	trap 'echo "test-pooler: $$(( $$(date +%s) - began )) s wall time (through PgBouncer)"' EXIT
	( $(POOLER_PYTEST) )

# The database-only tier (issue 27 item 7): no test that starts worker processes, a browser or a
# deployment (the markers tests/conftest.py gives from paths and fixtures). `make test` runs all.
FAST_TIER := -m "not live and not browser and not deploy"

test-fast: PYTEST_ARGS += $(FAST_TIER)
test-fast: $(STAMP)
	@$(DEVSERVICES_ENV)
	began=$$(date +%s)
	trap 'echo "test-fast: $$(( $$(date +%s) - began )) s wall time (the database-only tier)"' EXIT
	$(PYTEST)

lint: $(STAMP)
	@$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	@$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The Debian packages a test needs, installed once, when missing and we are root; else a warning
# (the test says what is missing). $(1): a shell test, true when present; $(2): the packages;
# $(3): what needs them; $(4): a command that prints what was installed; $(5): apt-get options.
define apt_tool
@if $(1); then
	exit 0
fi
if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "warning: $(2) missing and cannot apt-get install (not root or no apt-get), needed by $(3)" >&2
	exit 0
fi
echo "== installing Debian $(2) for $(3) (apt-get)"
apt_log="$$(mktemp)"
if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(5) $(2); } \
	>"$$apt_log" 2>&1; then
	echo "installed: $$($(4))"
else
	tail -n 20 "$$apt_log" >&2
	echo "warning: apt-get could not install $(2); $(3) will not run" >&2
fi
rm -f "$$apt_log"
endef

# Browser tests drive Debian's Chromium. Installed once, when missing and we are root.
chromium:
	$(call apt_tool,[ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ],chromium chromium-driver,browser tests,/usr/bin/chromium --version 2>/dev/null || echo chromium,)

# The Prometheus alerting rules (docker/prometheus/rules.yml) are unit-tested with
# `promtool test rules` (tests/ops/test_prometheus_rules.py); Debian's `prometheus` package has it.
promtool:
	$(call apt_tool,command -v promtool >/dev/null 2>&1,prometheus,the Prometheus rules test,promtool --version 2>&1 | head -n 1,--no-install-recommends)

# The front door's test (tests/deploy/test_front_door.py) runs docker/nginx/nginx.conf with
# Debian's nginx in front of a real gunicorn; `nginx-light` has every module the file uses.
nginx:
	$(call apt_tool,command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ],nginx-light,the front door test,/usr/sbin/nginx -v 2>&1,--no-install-recommends)

# The pooler tests (tests/sasproject/test_pooler_live.py, `make test-pooler`) run
# docker/pgbouncer/pgbouncer.ini with Debian's PgBouncer in front of the session's PostgreSQL.
pgbouncer:
	$(call apt_tool,command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ],pgbouncer,the pooler tests,/usr/sbin/pgbouncer --version 2>&1 | head -n 1,--no-install-recommends)

# ---------------------------------------------------------------------------------------------
# Benchmarks and services
# ---------------------------------------------------------------------------------------------
bench: $(STAMP)
	@$(DEVSERVICES_ENV)
	$(PY) bench/run_all.py $(BENCH_ARGS)

# Starts its own PostgreSQL, Redis (RabbitMQ) and every Procfile process on free ports; exits 1
# on any broken invariant. Heavy: on a shared machine run it under the bench lock.
soak: $(STAMP)
	@$(PY) -m soak --minutes $(MINUTES) --broker $(BROKER) --seed $(SEED) $(SOAK_ARGS)

services-status:
	@if [ -x $(PY) ]; then $(PY) -m devservices status; else echo "no $(VENV) yet"; fi

stop-services:
	@if [ -x $(PY) ]; then $(PY) -m devservices stop; fi

# Stops the embedded servers and deletes their data (the machine's servers are untouched).
clean-devdata: stop-services
	@rm -rf .devdata
