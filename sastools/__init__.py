"""The project's process tools for tests, bench/ and soak/: real Celery workers, beat, the
simulator and the web as subprocesses (harness), PostgreSQL and Redis servers of their own
(services), RabbitMQ (rabbit), the nginx front door (front_door). Product code never imports it
(an import-linter contract)."""
