"""What the runner contains: the process group it kills, the secrets it keeps from the script."""

import importlib.util
import os
import time

import pytest

from gradfix.codemods.execution.runner import RunOptions, ScriptRunner

SPAWNS = """\
import subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open("child.pid", "w").write(str(child.pid))
if sys.argv[1:] == ["hang"]:
    time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"  # a zombie waits for init to reap it
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def runner_with_secrets():
    saved = dict(os.environ)
    os.environ.update(GITHUB_TOKEN="ghp_x", AWS_SECRET_ACCESS_KEY="aws_x", WANDB_API_KEY="w_x", KEPT_TOKEN="kept")
    try:
        with ScriptRunner() as runner:
            runner.run(os.devnull)  # the server starts with this environment
            yield runner
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_script_does_not_see_secrets_unless_passed(runner_with_secrets, tmp_path):
    script = tmp_path / "env.py"
    script.write_text("import os\nprint(sorted(k for k in os.environ if k.endswith(('TOKEN', 'KEY'))))\n")
    result = runner_with_secrets.run(script, RunOptions(pass_env=("KEPT_TOKEN",)))
    assert result.status == "ok", result.describe()
    assert result.stdout.strip() == "['KEPT_TOKEN']"


@pytest.mark.parametrize("how", ["ends", "hang"])
def test_nothing_the_script_spawned_outlives_its_run(runner_with_secrets, tmp_path, how):
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS)
    result = runner_with_secrets.run(script, RunOptions(args=(how,), timeout=3, cwd=str(tmp_path)))
    assert result.status == ("timeout" if how == "hang" else "ok"), result.describe()
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_a_script_that_leaves_with_os_exit_still_has_its_run_recorded(runs, tmp_path):
    script = tmp_path / "leaves.py"
    script.write_text("import os\nprint('trained')\nos._exit(0)\n")
    result = runs.runner.run(script)
    assert result.status == "ok" and result.stdout == "trained\n", result.describe()
    script.write_text("import os\nos._exit(3)\n")
    failed = runs.runner.run(script)
    assert failed.status == "error" and failed.error_message == "os._exit(3)"


def test_verify_takes_a_timeout(tmp_path):
    from typer.testing import CliRunner

    from gradfix.cli.app import app

    case = tmp_path / "cached_graph" / "ok_hangs"
    case.mkdir(parents=True)
    (case / "ok.py").write_text("import time\ntime.sleep(30)\n")
    started = time.monotonic()
    result = CliRunner().invoke(app, ["verify", "--timeout", "2", str(case)])
    assert result.exit_code == 1 and "did not finish in time" in result.stdout
    assert time.monotonic() - started < 25


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="needs accelerate installed")
def test_a_framework_is_imported_into_the_server_when_a_script_first_needs_it(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nprint('accelerate' in sys.modules)\n")
    user = tmp_path / "user.py"
    user.write_text("from accelerate import Accelerator\n")
    with ScriptRunner() as runner:
        assert runner.run(probe).stdout == "False\n"  # a plain torch script pays nothing for it
        assert runner.run(user).status == "ok"
        assert runner.run(probe).stdout == "True\n"  # later runs fork with it loaded
