"""One jobs dispatcher process for bench/jobs.py's `firek` phase (issue 20):

    python -m bench.jobs_dispatcher_proc --name A --start <epoch s> --batch 1000

Set up Django (the environment bench/jobs.py gives it: the bench database), wait for `--start`,
then tick (`jobs_dispatch`, the shards it can lease) until two ticks in a row claim nothing.
Prints one JSON line: {"name", "started", "ticks", "s"}.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--start", type=float, required=True)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
    django.setup()
    from scheduler.dispatcher.tick import jobs_dispatch

    # As a worker's pool process does once it has started (sasproject/celery.py).
    gc.collect()
    gc.freeze()
    time.sleep(max(0.0, args.start - time.time()))
    began = time.perf_counter()
    started = ticks = idle = 0
    while idle < 2:
        done = jobs_dispatch(instance=args.name, batch=args.batch)
        ticks += 1
        started += done.started
        idle = idle + 1 if done.claimed == 0 else 0
        if done.claimed == 0:
            time.sleep(0.05)
    print(
        json.dumps({"name": args.name, "started": started, "ticks": ticks, "s": time.perf_counter() - began})
    )


if __name__ == "__main__":
    main()
