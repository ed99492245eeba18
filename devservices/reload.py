"""`make run` reloads (issue 31, item 5): the Procfile with each of the project's Python processes
(the web, the workers, beat) run under watchfiles, which restarts it when a .py file of the
project changes. The repository's Procfile stays as it is (the soak and the live tests run its
lines as they are); `make run` writes this version to .devdata/Procfile.reload and gives it to
honcho. `SAS_RELOAD=0 make run` runs the plain Procfile (then restart one process by hand:
docs/developing/README.md, "Reloading").

    python -m devservices.reload Procfile > .devdata/Procfile.reload

Imports no Django (devservices runs before the database exists).
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

# Processes restarted on a change: those that run the project's code. The simulator, Flower and
# the URL printer are left alone (Flower keeps its login session, the simulator its faults).
RELOADED = re.compile(r"^(web|control|dispatcher|beat|agents-[\w-]+|longjobs)$")
# Leading `NAME=value` words: the environment of the command, set for watchfiles (which passes
# it on) rather than given to watchfiles as the program.
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
# Folders watched besides the packages: templates change what the web renders.
EXTRA_WATCHED = ("templates",)
# Packages these processes never run: tests, tools and the stand-alone simulator.
NOT_WATCHED = frozenset({"tests", "bench", "soak", "chaos", "devservices", "sastools", "simulator"})


def watched_paths(root: Path) -> list[str]:
    """The project's top-level packages (and templates/): never .venv or .devdata, whose many
    folders would each cost an inotify watch in every process."""
    names = {p.parent.name for p in root.glob("*/__init__.py") if not p.parent.name.startswith(".")}
    packages = sorted(names - NOT_WATCHED)
    return packages + [name for name in EXTRA_WATCHED if (root / name).is_dir()]


def procfile_line_reloading(line: str, paths: list[str]) -> str:
    """One Procfile line, its command under watchfiles if its process is reloaded."""
    name, sep, command = line.partition(":")
    if not sep or line.lstrip().startswith("#") or not RELOADED.match(name.strip()):
        return line
    words = command.split()
    env = []
    while words and _ASSIGNMENT.match(words[0]):
        env.append(words.pop(0))
    rest = command.strip()
    for assignment in env:
        rest = rest[len(assignment) :].lstrip()
    watch = ["watchfiles", "--filter", "python", "--sigint-timeout", "10", shlex.quote(rest), *paths]
    return f"{name}:{' ' if env else ''}{' '.join(env)} {' '.join(watch)}".replace(":  ", ": ")


def procfile_reloading(text: str, root: Path) -> str:
    """The Procfile's text with every reloaded process under watchfiles."""
    paths = watched_paths(root)
    return "\n".join(procfile_line_reloading(line, paths) for line in text.splitlines()) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_file():
        print(
            "usage: python -m devservices.reload PROCFILE  (prints it with reloading processes)",
            file=sys.stderr,
        )
        return 2
    procfile = Path(args[0]).resolve()
    sys.stdout.write(procfile_reloading(procfile.read_text(), procfile.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
