"""SECURITY.md's promises, each checked here (or by the test SECURITY.md names): what ``check`` and
``fix`` never do with the checked tree, and what ``verify`` and ``diagnose`` keep from the scripts
they run."""

import base64
import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.execution.runner import RunOptions
from gradfix.codemods.execution.script_child import PROCESS_HEADROOM

from .conftest import FIXTURES
from .test_runner import SPAWNS, alive, assert_gone

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
CLEAN = (FIXTURES / "gf002_separate_backwards" / "ok_two_independent_networks" / "ok.py").read_text()
ROOT = Path(__file__).resolve().parents[1]
GRADFIX = [sys.executable, "-P", "-m", "gradfix"]  # as the console script: nothing from the working folder on sys.path


def leaves_a_mark(folder: Path) -> str:
    """Python that, if anything ever ran or imported it, would write ``folder/ran``."""
    return f"open({str(folder / 'ran')!r}, 'a').write(__name__ + '\\n')\n"


class Payload:
    """A pickle that runs code when it is loaded: what a pickled cache entry or run result can be."""

    def __init__(self, mark: Path) -> None:
        self.mark = mark

    def __reduce__(self):
        return exec, (f"open({str(self.mark)!r}, 'w').write('unpickled')",)


def test_every_test_security_md_names_exists():
    """A promise whose test was renamed or removed has no test."""
    named = re.findall(r"`(?:(tests/\w+\.py)::)?(test_\w+)`", (ROOT / "SECURITY.md").read_text())
    assert len(named) > 20
    for file, name in named:
        assert f"def {name}(" in (ROOT / (file or "tests/test_security.py")).read_text(), f"{file or 'tests/test_security.py'}::{name}"


# check and fix -----------------------------------------------------------------------------------
def test_check_and_fix_neither_run_nor_import_code_of_the_tree(tmp_path):
    tree = tmp_path / "tree"
    (tree / "gradfix").mkdir(parents=True)
    mark = leaves_a_mark(tree)
    (tree / "train.py").write_text(mark + DOUBLE)
    # Modules a Python process imports on its own, and names gradfix and its libraries import.
    for shadow in ("sitecustomize", "usercustomize", "conftest", "setup", "torch", "libcst", "typer", "rich", "gradfix/__init__"):
        (tree / f"{shadow}.py").write_text(mark)
    environment = {**os.environ, "GRADFIX_NO_CACHE": "1"}
    checked = subprocess.run([*GRADFIX, "check", "."], cwd=tree, env=environment, capture_output=True, text=True)
    assert checked.returncode == 1 and "GF002" in checked.stdout, checked.stderr
    fixed = subprocess.run([*GRADFIX, "fix", "."], cwd=tree, env=environment, capture_output=True, text=True)
    assert fixed.returncode == 0, fixed.stderr
    assert (tree / "train.py").read_text() == mark + DOUBLE_FIXED
    assert not (tree / "ran").exists()


@pytest.fixture
def cli_with_cache(monkeypatch, tmp_path):
    """``gradfix`` run in ``tmp_path / "tree"`` with its cache on, as the user of a machine whose
    user cache folder is ``tmp_path / machine``."""
    monkeypatch.delenv("GRADFIX_NO_CACHE")
    (tmp_path / "tree").mkdir()
    monkeypatch.chdir(tmp_path / "tree")

    def run(machine: str, *args: str):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / machine))
        return CliRunner().invoke(app, list(args))

    return run


def test_a_cache_committed_to_the_tree_is_never_read(tmp_path, cli_with_cache):
    tree = tmp_path / "tree"
    (tree / "train.py").write_text(DOUBLE)
    assert cli_with_cache("attacker", "fix", "--diff", ".").exit_code == 1  # the attacker's machine fills .gradfix_cache
    entries = [path for path in (tree / ".gradfix_cache").rglob("*") if path.is_file() and path.name != ".gitignore"]
    assert entries
    for entry in entries:  # under the very names its lookups computed, entries that run code
        entry.write_bytes(pickle.dumps(Payload(tmp_path / "unpickled")))
    fixed = cli_with_cache("victim", "fix", ".")
    assert fixed.exit_code == 0, fixed.stdout
    assert not (tmp_path / "unpickled").exists()
    assert (tree / "train.py").read_text() == DOUBLE_FIXED


@pytest.mark.parametrize(("link", "target"), [(".gradfix_cache", "."), (".gradfix_cache/.gitignore", "victim")])
def test_the_cache_follows_no_link_of_the_tree(tmp_path, cli_with_cache, link, target):
    tree, elsewhere = tmp_path / "tree", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "victim").write_text("kept\n")
    (tree / "train.py").write_text(DOUBLE)
    (tree / link).parent.mkdir(exist_ok=True)
    (tree / link).symlink_to(elsewhere / target)
    assert cli_with_cache("machine", "check", ".").exit_code == 1
    assert sorted(os.listdir(elsewhere)) == ["victim"] and (elsewhere / "victim").read_text() == "kept\n"


def cache_entries(tree: Path) -> list[Path]:
    return [path for path in (tree / ".gradfix_cache").rglob("*") if path.is_file() and path.name != ".gitignore"]


def report_json(entry: Path) -> tuple[bytes, dict]:
    """An entry's head (its MAC) and its report, as whoever can write the folder reads them."""
    data = entry.read_bytes()
    start = data.index(b'{"path":')
    return data[:start], json.loads(data[start:])


def test_fix_writes_only_the_file_it_read_whatever_an_entry_says(tmp_path, cli_with_cache):
    tree, victim = tmp_path / "tree", tmp_path / "victim"
    victim.write_text("kept\n")
    (tree / "train.py").write_text(DOUBLE)
    assert cli_with_cache("machine", "fix", "--diff", ".").exit_code == 1  # the cache holds train.py's fix
    [entry] = cache_entries(tree)
    head, report = report_json(entry)
    written = {"original": base64.b64encode(b"kept\n").decode(), "rewritten": base64.b64encode(b"whatever the cache says\n").decode()}
    entry.write_bytes(head + json.dumps({**report, "path": str(victim), **written}).encode())
    fixed = cli_with_cache("machine", "fix", ".")
    assert fixed.exit_code == 0, fixed.stdout
    assert victim.read_text() == "kept\n"
    assert (tree / "train.py").read_text() == DOUBLE_FIXED


def test_an_entry_copied_over_another_files_is_not_served_for_it(tmp_path, cli_with_cache):
    tree = tmp_path / "tree"
    (tree / "double.py").write_text(DOUBLE)
    (tree / "clean.py").write_text(CLEAN)
    assert cli_with_cache("machine", "check", "double.py").exit_code == 1
    [double_entry] = cache_entries(tree)
    assert cli_with_cache("machine", "check", "clean.py").exit_code == 0
    [clean_entry] = [entry for entry in cache_entries(tree) if entry != double_entry]
    shutil.copyfile(double_entry, clean_entry)
    checked = cli_with_cache("machine", "check", "clean.py")
    assert checked.exit_code == 0 and checked.stdout == "", checked.stdout


@pytest.mark.parametrize("opened", ["folder", "secret"])
def test_a_cache_folder_or_secret_others_could_write_is_refused_and_said(tmp_path, cli_with_cache, opened):
    shared, secret = tmp_path / "shared", tmp_path / "machine" / "gradfix" / "cache-secret"
    shared.mkdir()
    (tmp_path / "tree" / "train.py").write_text(DOUBLE)
    assert cli_with_cache("machine", "check", ".").exit_code == 1  # makes this machine's secret
    if opened == "folder":
        os.chmod(shared, 0o777)
        why = f"{shared} can be written by other users (chmod go-w it)"
    else:
        os.chmod(secret, 0o644)
        why = f"its secret {secret} can be read or written by other users (chmod 600 it)"
    result = cli_with_cache("machine", "check", "--cache-dir", str(shared), ".")
    assert result.exit_code == 1 and "GF002" in result.stdout
    assert f"warning: --cache-dir {shared}: {why}; checking without the cache\n" in result.stderr
    assert os.listdir(shared) == []


# verify and diagnose -------------------------------------------------------------------------------
SECRETS = {
    "GITHUB_TOKEN": "ghs_x", "GH_PAT": "ghp_x", "X_PAT": "x", "X_AUTH": "x", "X_PWD": "x", "X_PASS": "x",
    "X_DSN": "x", "X_JWT": "x", "SSH_AUTH_SOCK": "/tmp/agent", "DATABASE_URL": "postgres://u:pw@h/d",
    "TORCH_HUB_TOKEN": "x", "HTTPS_PROXY": "http://u:pw@proxy:3128",  # allowed names holding secrets
}  # fmt: skip
ALLOWED = {"LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "NO_PROXY": "localhost"}
NOT_ALLOWED = {"MY_SETTING": "mine"}

# What a script can learn of the processes above it: its environment, the environment files of its
# process, its server and gradfix, and which of their file descriptors (gradfix's pipes) it can open.
PROBE = """\
import json, os

def environment(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return sorted(entry.split(b"=", 1)[0].decode() for entry in handle.read().split(b"\\0") if entry)
    except OSError as error:
        return type(error).__name__

def opened(pid):
    # The file descriptors of pid it can open anew (a pipe's other end among them).
    numbers = []
    for number in range(32):
        try:
            os.close(os.open(f"/proc/{pid}/fd/{number}", os.O_RDONLY | os.O_NONBLOCK))
            numbers.append(number)
        except OSError:
            pass
    return numbers

server = os.getppid()
with open(f"/proc/{server}/stat") as handle:
    gradfix = int(handle.read().rpartition(")")[2].split()[1])
print(json.dumps({
    "os.environ": sorted(os.environ), "self": environment("self"), "server": environment(server),
    "gradfix": environment(gradfix), "server fds": opened(server), "gradfix fds": opened(gradfix),
}))
"""
THREADS = """\
import sys, threading, time
threading.stack_size(64 << 10)
started = 0
try:
    for _ in range(int(sys.argv[1])):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        started += 1
except RuntimeError:  # can't start new thread
    pass
print(started)
"""
# gradfix as a user without privileges runs it: it holds the secrets, and runs the two scripts.
SCENARIO = """\
import json, sys
from gradfix.codemods.execution.runner import RunOptions, ScriptRunner
probe, threads, count = sys.argv[1:]
with ScriptRunner() as runner:
    print(json.dumps([runner.run(script, RunOptions(args=args)).stdout for script, args in ((probe, ()), (threads, (count,)))]))
"""


def unprivileged(command: list[str]) -> list[str]:
    """``command`` as a user without privileges: root reads every process's /proc files and the
    kernel exempts it from RLIMIT_NPROC. As root, it runs as nobody, keeping only the right to read
    any file (the Python installation may be under /root)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("runs as root, and setpriv is not there to drop root's privileges")
    keep_reading = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *keep_reading, *command]


@pytest.fixture(scope="module")
def unprivileged_runs(tmp_path_factory):
    """What the probe printed, and how many threads the other script started, run by an
    unprivileged gradfix whose environment holds ``SECRETS``."""
    folder = tmp_path_factory.mktemp("unprivileged")
    (folder / "probe.py").write_text(PROBE)
    (folder / "threads.py").write_text(THREADS)
    environment = {"PATH": os.environ["PATH"], **SECRETS, **ALLOWED, **NOT_ALLOWED}
    command = unprivileged([sys.executable, "-P", "-c", SCENARIO, str(folder / "probe.py"), str(folder / "threads.py"), str(PROCESS_HEADROOM + 256)])
    done = subprocess.run(command, cwd="/", env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    probe, threads = json.loads(done.stdout)
    return json.loads(probe), int(threads)


def test_no_secret_reaches_the_script_nor_its_server(unprivileged_runs):
    seen, _ = unprivileged_runs
    for where in ("os.environ", "self"):  # a child's /proc/self/environ is its server's, copied at the fork
        assert not set(seen[where]) & set(SECRETS), where
        assert set(ALLOWED) <= set(seen[where]) and not set(NOT_ALLOWED) & set(seen[where]), where


def test_the_script_cannot_read_the_environment_or_pipes_of_gradfix_or_its_server(unprivileged_runs):
    seen, _ = unprivileged_runs
    assert seen["gradfix"] == seen["server"] == "PermissionError"
    assert seen["gradfix fds"] == seen["server fds"] == []


def test_the_processes_and_threads_a_script_starts_are_limited(unprivileged_runs):
    _, started = unprivileged_runs
    assert PROCESS_HEADROOM // 2 < started <= PROCESS_HEADROOM


def test_a_result_the_script_forges_is_not_unpickled(runs, tmp_path):
    mark = tmp_path / "unpickled"
    script = tmp_path / "forges.py"
    # The script runs in the process that writes its result: it can replace whatever writes it.
    script.write_text(
        f"import pickle, sys\nforged = {pickle.dumps(Payload(mark))!r}\n"
        "pickle.dump = lambda value, handle, *rest, **options: handle.write(forged)\n"
        "sys.modules['gradfix.codemods.typed_json'].dumps = lambda *rest: forged\n"
    )
    result = runs.runner.run(script)
    assert not mark.exists()
    assert result.status == "crashed" and result.error_message == "the run left a result gradfix cannot read"


def test_the_memory_a_script_allocates_is_limited(runs, tmp_path):
    script = tmp_path / "allocates.py"
    script.write_text("held = bytearray(1 << 30)\n")
    result = runs.runner.run(script, RunOptions(memory_limit=256 << 20))
    assert result.status == "error" and result.error_type == "MemoryError", result.describe()


def test_a_candidate_runs_from_memory_and_nothing_is_written_beside_the_script(runs, tmp_path):
    (tmp_path / "steps.py").write_text("def step():\n    return 'step on disk'\n")
    script = tmp_path / "train.py"
    script.write_text("import os, steps\nprint('train on disk', steps.step())\n")
    files = sorted(os.listdir(tmp_path))
    rewritten = {
        script: "import os, steps\nprint('rewritten', steps.step(), sorted(os.listdir('.')))\nraise SystemError('rewritten line')\n",
        tmp_path / "steps.py": "def step():\n    return 'rewritten step'\n",
    }
    sources = tuple((str(path), text.encode()) for path, text in rewritten.items())
    result = runs.runner.run(script, RunOptions(cwd=str(tmp_path), sources=sources))
    assert result.stdout == f"rewritten rewritten step {files}\n"
    assert [(frame.line, frame.code) for frame in result.failing_frames] == [(3, "raise SystemError('rewritten line')")]
    assert sorted(os.listdir(tmp_path)) == files


def test_a_killed_gradfix_leaves_no_process_and_no_scratch_folder(tmp_path):
    """A CI job cancelled, or gradfix killed by the OOM killer: SIGKILL to gradfix's process group."""
    folder, scratch, started_in = tmp_path / "project", tmp_path / "tmp", tmp_path / "cwd"
    for made in (folder, scratch, started_in):
        made.mkdir()
    (started_in / "torch.py").write_text(leaves_a_mark(tmp_path))  # gradfix's folder is not the server's sys.path
    script = folder / "train.py"
    script.write_text("import os\nopen('run.pid', 'w').write(f'{os.getppid()} {os.getpid()}')\n" + SPAWNS)
    gradfix = subprocess.Popen(
        [*GRADFIX, "diagnose", "--timeout", "60", str(script), "hang"],
        cwd=started_in, env={**os.environ, "TMPDIR": str(scratch)}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    children, deadline = folder / "children.pid", time.monotonic() + 60
    try:
        while not (children.exists() and children.read_text()) and gradfix.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (tmp_path / "ran").exists()
        written = [(folder / "run.pid").read_text(), children.read_text()]
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already if the test failed
            os.killpg(gradfix.pid, signal.SIGKILL)
        gradfix.wait()
    for pid in " ".join(written).split():
        assert_gone(int(pid))

    def left_in_scratch() -> list[str]:
        return [name for name in os.listdir(scratch) if name.startswith("gradfix-")]

    # The run server, in a session of its own, removes its folder once it sees gradfix gone: on
    # a loaded machine that may come after the run's processes are.
    deadline = time.monotonic() + 60
    while left_in_scratch() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left_in_scratch()
    assert sorted(os.listdir(folder)) == ["children.pid", "daemon.pid", "run.pid", "train.py"]


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_what_escapes_a_dead_server_stops_at_its_cpu_time_limit(runs, tmp_path):
    """The server killed alone (SIGKILL): a process its run had moved to a session of its own is
    left, until the CPU-time limit every run's processes inherit ends it."""
    script = tmp_path / "spins.py"
    script.write_text(
        "import os, time, torch\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    open('spinner.pid', 'w').write(str(os.getpid()))\n"
        "    square = torch.ones(512, 512)\n"
        "    while True:\n"
        "        square @ square\n"
        "time.sleep(300)\n"
    )
    spinner = tmp_path / "spinner.pid"
    twin = runs.runner.twin()  # a server of its own to kill, forked from the warm one

    def kill_the_server_once_the_spinner_runs():
        while not (spinner.exists() and spinner.read_text()):
            time.sleep(0.01)
        os.kill(twin._server.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_server_once_the_spinner_runs)
    killer.start()
    # The wall-clock timeout only has to outlast the fork (it also sets the CPU limit: 2 s per core, plus 1).
    result = twin.run(script, RunOptions(timeout=2, cwd=str(tmp_path)))
    killer.join()
    twin.close()
    pid = int(spinner.read_text())
    limit = 2 * len(os.sched_getaffinity(0)) + 1
    try:
        assert result.status == "crashed" and alive(pid)
        # On a busy machine the spinner gets a share of a core, and a process killed at its limit
        # takes a while to be scheduled and die: wait for the CPU time it used, not for wall time,
        # up to a bound no healthy machine comes near. Unlimited, it would spin on past limit + 15.
        deadline = time.monotonic() + 600
        while alive(pid) and _cpu_seconds(pid) < limit + 15 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid), f"{_cpu_seconds(pid)} s of CPU time, over the limit of {limit} s"
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
