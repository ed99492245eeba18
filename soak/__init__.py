"""The chaos soak (issue 22): the whole stack under a steady load and a seeded storm of faults,
then a drain and a check of every promise from the database and the simulator's ledger.

    python -m soak [--minutes 30] [--seed 1] [--broker redis|rabbitmq]      (or `make soak`)

- `stack`: private PostgreSQL, Redis (and RabbitMQ) servers it may restart, fault proxies
  between the workers and PostgreSQL / the broker, and the Procfile's processes on them;
- `load`: the separate load process (orders over the API, one-off jobs, exports);
- `faults`: the seeded schedule and what each fault does;
- `check`: the invariants, as functions of the rows and the ledger (tested on planted data);
- `run`: the orchestration and the report.
"""
