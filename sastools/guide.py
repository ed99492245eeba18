"""The developers' guide as a script (issue 31): its executable blocks in order - a
```python file=PATH block is written to PATH, a ```sh exec block is run with bash - for the test
that runs the guide in a copy of the repository (tests/docs/test_guides_live.py) and the
newcomer's timed path (bench/newcomer.py). One reader of the guide for both."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .repo_copy import ROOT

GUIDE = ROOT / "docs" / "developing" / "workflows.md"
# What the guide's set-up block exports besides devservices' URLs (the caller's environment has
# those): the blocks run with it and without whatever else the caller's shell had set for Django.
GUIDE_ENV = {"DJANGO_DEBUG": "1"}
GUIDE_SETUP = 'export DJANGO_DEBUG=1\neval "$(.venv/bin/python -m devservices env)"'
_BLOCK = re.compile(r"^```(?:sh (?P<exec>exec)|python file=(?P<file>\S+))\n(?P<text>.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class GuideBlock:
    text: str
    file: str | None = None  # a file block: the path, relative to the repository's root

    @property
    def title(self) -> str:
        return f"file {self.file}" if self.file else self.text.strip().splitlines()[-1]


@dataclass(frozen=True)
class GuideResult:
    block: GuideBlock
    seconds: float
    returncode: int
    stdout: str
    stderr: str


def guide_blocks(guide: Path = GUIDE) -> list[GuideBlock]:
    return [GuideBlock(text=m["text"], file=m["file"]) for m in _BLOCK.finditer(guide.read_text())]


def guide_block_run(copy: Path, block: GuideBlock, *, timeout: float = 600) -> GuideResult:
    """Write a file block into `copy`, or run an exec block there (bash -euo pipefail, the
    caller's environment): its time and output."""
    began = time.perf_counter()
    if block.file is not None:
        target = copy / block.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
        return GuideResult(block, time.perf_counter() - began, 0, "", "")
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}, **GUIDE_ENV},
    )
    return GuideResult(block, time.perf_counter() - began, result.returncode, result.stdout, result.stderr)
