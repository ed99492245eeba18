"""The job page's, run page's and runs API's reads (issue 28, bench/outputs.py):

- run_job_created_idx gains the id, the pages' tie-breaker: a page of a job's runs is read in
  the index's order (no sort of the job's runs) and its ids from the index alone. Built under
  another name, the old one dropped, then renamed: no moment without an index on a job's runs.
- step_undone_run_idx: the compensation steps that reached Processed ("did this run undo
  anything?", scheduler/outcomes.py), a few rows; the planner hashed a scan of the whole step
  table for every page that asked.
- history_job_rows_idx: a job's own history rows (`job_history`), in the pages' order.

Concurrently, outside a transaction, as 0018: an upgrade with millions of rows does not stop the
engine's writes while the indexes are built."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduler", "0030_bulkhead_slots"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                models.F("job"),
                models.OrderBy(models.F("created_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(("job__isnull", False)),
                name="run_job_created_id_idx",
            ),
        ),
        RemoveIndexConcurrently(model_name="run", name="run_job_created_idx"),
        migrations.RenameIndex(model_name="run", new_name="run_job_created_idx", old_name="run_job_created_id_idx"),
        AddIndexConcurrently(
            model_name="step",
            index=models.Index(
                condition=models.Q(("kind", "compensation"), ("process_state", "processed")),
                fields=["run"],
                name="step_undone_run_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="taskexecutionhistory",
            index=models.Index(
                models.F("job"),
                models.OrderBy(models.F("started_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(("job__isnull", False), ("kind__in", ["job", "operator"])),
                name="history_job_rows_idx",
            ),
        ),
    ]
