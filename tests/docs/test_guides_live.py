"""The developers' guide runs (issue 31, item 1): every ```sh exec block of
docs/developing/workflows.md, in order, in a copy of the repository, each must exit 0 - a guide
example that stops working fails the build. The guide must have such blocks."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sastools.repo_copy import ROOT, repository_copy

GUIDE = ROOT / "docs" / "developing" / "workflows.md"
BLOCK = re.compile(r"^```sh exec\n(.*?)^```", re.S | re.M)
pytestmark = pytest.mark.timeout(900)


def test_developing_guide__its_exec_blocks_run_in_a_copy(tmp_path: Path) -> None:
    blocks = BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 3, "the guide lost its executed examples"
    copy = repository_copy(tmp_path)

    for block in blocks:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=600,
            env=dict(os.environ),
        )
        assert result.returncode == 0, f"{block}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    assert (copy / "greeting" / "workflows.py").is_file()
