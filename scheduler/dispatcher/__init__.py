"""The jobs dispatcher's room (seed 004's Scheduler Service; issue 20): everything that decides
when a job's occurrences start, and writes it.

- `cron.py`: cron arithmetic (`cronsim`) and `next_occurrence` (a job's next time within its window);
- `transitions.py` + `jobs.sql`: the jobs' state changes, one named statement each, and the
  shards' leases; `transitions.md`'s jobs table is `scheduler/jobs.md` ("The jobs' transitions");
- `firing.py`: `FiringPlan`, the one object that decides an occurrence (fire, skip, buffer,
  defer behind a running run, catch up) and writes a batch's decisions;
- `starts.py`: the runs a batch starts - input and permission asked again at every firing;
- `tick.py`: the tick (settle ended runs; shard by shard, claim due rows and fire them), its
  wake-up at the next due time and its relay to idle dispatchers;
- `selectors.py`: reads of jobs for their owners;
- `tasks.py`: the Celery task `scheduler.jobs_dispatch`; `beat.py`: its django-celery-beat row.

The user-facing job services (create, edit, pause, run now, backfill, preview) are
`scheduler/services/jobs.py` (the rules of a job's input: `job_input.py`); the `jobs/` app is
the web, API and admin face and calls the room through those services and the selectors only.
The rules: `scheduler/jobs.md`.
"""
