"""Every link between the repository's pages resolves (issue 31, item 1: the docs moved to
docs/using, operating, deploying and developing): a relative Markdown link in any tracked .md
file, and every path under docs/ ending in .md that code, templates, tests or pages mention, names a file
that exists (its #anchor a heading of it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.test_sizes import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")
DOC_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]+\.md")
TEXT_SUFFIXES = {".md", ".py", ".py-tpl", ".html", ".yml", ".yaml", ".toml", ".txt", ".cfg", ".example", ""}


def _tracked() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("#") and not line.startswith("#!"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_markdown_links__relative_targets_and_anchors_exist() -> None:
    broken = []
    for page in (p for p in _tracked() if p.suffix == ".md"):
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve()
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_docs_paths__mentioned_anywhere__exist() -> None:
    missing = []
    for path in _tracked():
        if path.suffix not in TEXT_SUFFIXES or ".venv" in path.parts:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for mention in set(DOC_PATH.findall(text)):
            if not (ROOT / mention).is_file():
                missing.append(f"{path.relative_to(ROOT)}: {mention}")
    assert not missing, "docs paths that do not exist:\n" + "\n".join(sorted(missing))
