"""What a ``check`` killed midway (SIGKILL: a cancelled CI job, the OOM killer) leaves: none of its
worker processes, and the cache entries of the files it had finished."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import FIXTURES
from .test_runner import alive

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
FINISHED = 7  # files the run checks besides the one it never finishes
PATIENCE = 300  # seconds: a bound no healthy run comes near, even on a loaded machine

# gradfix's command, with a check that never ends for blocked.py: its worker notes its pid, then waits.
NEVER_FINISHES_BLOCKED = """\
import os, sys, time
from pathlib import Path
from gradfix.codemods import check

checked, mark = check.check_source, Path(sys.argv[1])

def check_source(data, rules, mode, path, *args):
    if Path(path).name == "blocked.py":
        mark.write_text(str(os.getpid()))
        time.sleep(3600)
    return checked(data, rules, mode, path, *args)

check.check_source = check_source
sys.argv[1:] = ["check", "--jobs", "2", "--cache-dir", sys.argv[2], sys.argv[3]]
from gradfix.cli import main
main()
"""


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "stat").read_text()
        except OSError:  # not a process, or one that ended meanwhile
            continue
        if int(status.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def wait_for(condition) -> bool:
    deadline = time.monotonic() + PATIENCE
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return condition()


def entries(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and not path.name.startswith(".")]


@pytest.fixture
def blocked_run(tmp_path):
    """``gradfix check --jobs 2`` on ``blocked.py`` (the first file: never finished) and
    ``FINISHED`` more, running in a process of its own. Whatever the run left alive is killed afterwards."""
    tree, mark = tmp_path / "tree", tmp_path / "blocked"
    tree.mkdir()
    for index in range(FINISHED):
        (tree / f"train_{index}.py").write_text(DOUBLE)
    (tree / "blocked.py").write_text(DOUBLE)
    environment = {key: value for key, value in os.environ.items() if key != "GRADFIX_NO_CACHE"}
    environment["XDG_CACHE_HOME"] = str(tmp_path / "user-cache")
    process = subprocess.Popen(
        [sys.executable, "-P", "-c", NEVER_FINISHES_BLOCKED, str(mark), str(tmp_path / "cache"), str(tree)],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    run = BlockedRun(process, mark, tmp_path / "cache")
    try:
        yield run
    finally:
        if process.poll() is None:
            run.kill()
        for pid in run.workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


class BlockedRun:
    def __init__(self, process: subprocess.Popen, mark: Path, cache: Path) -> None:
        self.process, self.mark, self.cache = process, mark, cache
        self.workers: list[int] = []

    def blocked(self) -> bool:
        """Whether a worker is checking blocked.py (and so every worker exists)."""
        return self.mark.exists() and self.mark.read_text() != ""

    def kill(self) -> None:
        """SIGKILL the run's main process alone, noting its workers first."""
        self.workers = children(self.process.pid)
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()


def test_the_workers_of_a_killed_run_die_with_it(blocked_run):
    assert wait_for(blocked_run.blocked)
    blocked_run.kill()
    assert int(blocked_run.mark.read_text()) in blocked_run.workers and len(blocked_run.workers) == 2
    assert wait_for(lambda: not any(alive(pid) for pid in blocked_run.workers))


def test_a_killed_run_keeps_the_entries_of_the_files_it_finished(blocked_run):
    assert wait_for(lambda: len(entries(blocked_run.cache)) == FINISHED)
    blocked_run.kill()
    assert len(entries(blocked_run.cache)) == FINISHED
