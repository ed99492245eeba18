"""The developers' guide runs (issue 31, item 1): every executable block of
docs/developing/workflows.md, in order, in a copy of the repository (sastools/guide.py: a file
block written, an ```sh exec block run), each must exit 0 - a guide example that stops working
fails the build. The guide goes from `startworkflow` to a three-step saga whose four harness
tests pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from sastools.guide import GUIDE, GUIDE_SETUP, guide_block_run, guide_blocks
from sastools.repo_copy import repository_copy

pytestmark = pytest.mark.timeout(900)


def test_developing_guide__its_blocks_run_in_a_copy__the_saga_tests_pass(tmp_path: Path) -> None:
    blocks = guide_blocks()
    assert sum(1 for b in blocks if b.file is None) >= 4, "the guide lost its executed examples"
    assert {b.file for b in blocks} >= {"greeting/saga.py", "tests/greeting/test_saga.py"}
    assert GUIDE_SETUP in GUIDE.read_text()  # the environment the blocks run with, as the guide says
    copy = repository_copy(tmp_path)

    outputs = {}
    for block in blocks:
        result = guide_block_run(copy, block)
        assert result.returncode == 0, f"{block.text}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        outputs[block.text] = result.stdout
    assert (copy / "greeting" / "workflows.py").is_file()
    (saga_run,) = [out for text, out in outputs.items() if "tests/greeting/test_saga.py" in text]
    assert "4 passed" in saga_run
