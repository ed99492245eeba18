"""The Django-tasks guide runs (issue 31 item 4): docs/developing/django-tasks.md's task module
(its ```python block that starts `# yourapp/tasks.py`) is written to a package of its own, a
worker that imports it is started on `agent.tasks`, and the guide's ```sh exec blocks run
against it - a guide example that stops working fails the build."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from sastools.repo_copy import ROOT

GUIDE = ROOT / "docs" / "developing" / "django-tasks.md"
SH = re.compile(r"^```sh exec\n(.*?)^```", re.S | re.M)
PY = re.compile(r"^```python\n(# yourapp/tasks\.py\n.*?)^```", re.S | re.M)


def test_django_tasks_guide__its_example_runs_on_a_worker(engine, start_worker, tmp_path: Path) -> None:
    text = GUIDE.read_text()
    (module,) = PY.findall(text)
    blocks = SH.findall(text)
    assert blocks, "the guide lost its executed example"
    package = tmp_path / "yourapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(module)
    path = os.pathsep.join([str(tmp_path), str(ROOT)])
    modules = f"{engine.env['SAS_WORKFLOW_MODULES']},yourapp.tasks"

    # Only the guide's worker consumes agent.tasks meanwhile: the session's agents worker never
    # imported yourapp.tasks, and would refuse the task.
    engine.agents.kill(signal.SIGSTOP)
    try:
        start_worker(
            name="guide", queues="agent.tasks", concurrency=1, PYTHONPATH=path, SAS_WORKFLOW_MODULES=modules
        )
        for block in blocks:
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                env={**engine.env, "PYTHONPATH": path, "SAS_WORKFLOW_MODULES": modules},
            )
            assert result.returncode == 0, f"{block}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            assert "SUCCESSFUL" in result.stdout
    finally:
        engine.agents.kill(signal.SIGCONT)
