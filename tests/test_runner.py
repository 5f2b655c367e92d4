"""What the runner contains: the processes it kills, the variables it keeps from the script."""

import importlib.util
import os
import signal
import time

import pytest

from gradfix.codemods.execution.runner import RunOptions, ScriptRunner, script_environment

# A child in the script's process group, one in a session of its own, and a daemon (a double fork
# in a new session, whose middle process leaves): none is in the group gradfix kills.
SPAWNS = """\
import os, subprocess, sys, time
grouped = subprocess.Popen(["sleep", "300"])
escaped = subprocess.Popen(["sleep", "300"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
while not os.path.exists("daemon.pid") or not open("daemon.pid").read():
    time.sleep(0.01)
open("children.pid", "w").write(f"{grouped.pid} {escaped.pid} {open('daemon.pid').read()}")
if sys.argv[1:] == ["hang"]:
    time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] != "Z"  # a zombie waits for init to reap it
    except FileNotFoundError:
        return False


def assert_gone(pid: int) -> None:
    """The process ends within seconds (killing a group is not instant)."""
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_a_variable_reaches_the_script_only_when_passed(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("KEPT_TOKEN", "kept")
    monkeypatch.setenv("MY_SETTING", "mine")
    script = tmp_path / "env.py"
    script.write_text("import os\nprint(os.environ.get('KEPT_TOKEN'), os.environ.get('MY_SETTING'))\n")
    assert runs.runner.run(script).stdout == "None None\n"
    passed = runs.runner.run(script, RunOptions(pass_env=("KEPT_TOKEN", "MY_SETTING")))
    assert passed.stdout == "kept mine\n", passed.describe()


@pytest.mark.parametrize(
    "name, value",
    [
        ("HTTPS_PROXY", "http://ghp_token@proxy:3128"),  # a token as the user, no password
        ("HTTP_PROXY", "http://user:pa/ss@proxy:3128"),  # a slash in the password
        ("https_proxy", "http://user:pass word@proxy:3128"),  # a space in it
        ("http_proxy", "user:secret@proxy:3128"),  # no scheme: urllib and curl read it as a proxy's
        ("TORCH_HUB_URL", "https://user:secret@hub.internal/models"),
        ("TORCH_HUB_AUTHORIZATION", "Basic dXNlcjpwYXNz"),
        ("TORCH_HUB_BEARER", "eyJhbGciOi"),
        ("NVIDIA_REQUEST_SIGNATURE", "5d41402abc4b2a76"),
        ("TORCH_SSL_PASSPHRASE", "hunter2"),
        ("CUDA_REGISTRY_CREDS", "user:secret"),
        ("TORCH_HUB_CRED", "user:secret"),
    ],
)
def test_a_credential_in_an_allowed_variable_does_not_reach_the_script(name, value):
    assert script_environment({name: value, "LANG": "C.UTF-8"}) == {"LANG": "C.UTF-8"}


def test_settings_of_cuda_torch_nccl_and_a_proxy_without_credentials_reach_the_script():
    settings = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_CUDA_ARCH_LIST": "8.0;8.6+PTX",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "TORCH_HOME": "/cache/torch",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "mlx5_0:1",
        "NCCL_ASYNC_ERROR_HANDLING": "1",
        "HTTPS_PROXY": "http://proxy.internal:3128",
        "NO_PROXY": "localhost,.internal",
        "PATH": "/home/me/.nvm/versions/node@18/bin:/usr/bin",  # an @ in a folder's name
    }
    assert script_environment(settings) == settings


@pytest.mark.parametrize("how", ["ends", "hang"])
def test_nothing_the_script_spawned_outlives_its_run(runs, tmp_path, how):
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS)
    result = runs.runner.run(script, RunOptions(args=(how,), timeout=3, cwd=str(tmp_path)))
    assert result.status == ("timeout" if how == "hang" else "ok"), result.describe()
    for pid in (tmp_path / "children.pid").read_text().split():
        assert_gone(int(pid))


def test_a_script_that_leaves_with_os_exit_still_has_its_run_recorded(runs, tmp_path):
    script = tmp_path / "leaves.py"
    script.write_text("import os\nprint('trained')\nos._exit(0)\n")
    result = runs.runner.run(script)
    assert result.status == "ok" and result.stdout == "trained\n", result.describe()
    script.write_text("import os\nos._exit(3)\n")
    failed = runs.runner.run(script)
    assert failed.status == "error" and failed.error_message == "os._exit(3)"


def test_a_script_that_is_a_pipe_times_out_and_the_runner_goes_on(runs, tmp_path):
    os.mkfifo(tmp_path / "train.py")  # nothing ever writes to it: reading it waits for ever
    assert runs.runner.run(tmp_path / "train.py", RunOptions(timeout=1)).status == "timeout"
    assert runs.runner.run(os.devnull).status == "ok"


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


def test_a_server_that_dies_during_a_run_is_a_crash_and_takes_the_script_along(runs, tmp_path):
    import threading

    script = tmp_path / "hang.py"
    script.write_text("import os, time\nopen('script.pid', 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    marker = tmp_path / "script.pid"
    twin = runs.runner.twin()  # a server of its own to kill, forked from the warm one

    def kill_the_server_once_the_script_runs():
        while not (marker.exists() and marker.read_text()):
            time.sleep(0.05)
        os.kill(twin._server.pid, 9)

    killer = threading.Thread(target=kill_the_server_once_the_script_runs)
    killer.start()
    result = twin.run(script, RunOptions(timeout=30, cwd=str(tmp_path)))
    killer.join()
    twin.close()
    assert result.status == "crashed" and "runner process died" in result.error_message
    pid = int(marker.read_text())
    assert_gone(pid)


# `python -m gradfix` as a terminal starts it: with Python's Ctrl-C handler, which Python (and so
# gradfix) leaves out when it starts with SIGINT ignored, as a shell's background job (pytest run
# with `&`) passes it on. Given a file's path, gradfix is held right after it read the pid of the
# script its server started, before its run knows that pid: where a busy machine's scheduler may
# leave it while the script already runs. The file says it is held there.
AS_FROM_A_TERMINAL = """\
import runpy, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
held, sys.argv = sys.argv[1], ["gradfix", *sys.argv[2:]]
if held:
    from gradfix.codemods.execution import runner
    receive_number = runner._receive_number
    def read_then_held(stream):
        number = receive_number(stream)
        open(held, "w").write("held")
        time.sleep(300)
    runner._receive_number = read_then_held
runpy.run_module("gradfix", run_name="__main__")
"""


@pytest.mark.parametrize("held", [False, True], ids=["while the script runs", "as its pid reaches gradfix"])
@pytest.mark.parametrize(("signal_number", "status", "said"), [(15, 143, "terminated"), (2, 130, "interrupted")])
def test_a_signal_ends_gradfix_with_one_line_and_kills_the_script(tmp_path, signal_number, status, said, held):
    import subprocess
    import sys

    script = tmp_path / "hang.py"
    # (diagnose runs the script twice at once, traced and beside it: each adds its pid, one write of a line)
    script.write_text("import os, time\nopen('script.pids', 'a').write(f'{os.getpid()}\\n')\ntime.sleep(300)\n")
    marker, held_marker = tmp_path / "script.pids", tmp_path / "held"
    command = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, str(held_marker) if held else "", "diagnose", "--timeout", "60", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = [marker, held_marker] if held else [marker]
    deadline = time.monotonic() + 60
    while not all(path.exists() and path.read_text() for path in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(command.pid, signal_number)
    _, stderr = command.communicate(timeout=30)
    assert command.returncode == status, stderr
    assert stderr.strip().splitlines()[-1] == f"gradfix: {said}"
    assert "Traceback" not in stderr
    for pid in marker.read_text().split():
        assert_gone(int(pid))


def test_a_flood_of_output_is_kept_as_its_head_and_tail(runs, tmp_path):
    script = tmp_path / "loud.py"
    script.write_text("print('first line')\nfor i in range(300_000):\n    print('x' * 20)\nprint('last line')\n")
    result = runs.runner.run(script, RunOptions(cwd=str(tmp_path)))
    assert result.status == "ok"
    assert result.stdout.startswith("first line\n") and result.stdout.endswith("last line\n")
    assert len(result.stdout) < 1.1 * (1 << 20) and "bytes of output left out" in result.stdout


ENDLESS_TRAINING = """\
import torch
w = torch.zeros(3, requires_grad=True)
optimizer = torch.optim.SGD([w], lr=0.1)
while True:
    optimizer.zero_grad()
    (w - 1).pow(2).sum().backward()
    optimizer.step()
"""


def test_a_run_stops_at_its_optimizer_step_or_time_bound_and_says_which(runs, tmp_path):
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS_TRAINING)
    stepped = runs.runner.run(script, RunOptions(max_optimizer_steps=3, timeout=30))
    assert (stepped.status, stepped.stopped_by, stepped.optimizer_steps) == ("stopped", "optimizer steps", 3)
    assert stepped.describe() == "stopped after 3 optimizer step(s), the step bound"
    timed = runs.runner.run(script, RunOptions(stop_after=0.5, timeout=30))
    # How many steps half a second holds depends on the machine's load: none, on a busy one.
    assert (timed.status, timed.stopped_by) == ("stopped", "time")
    assert timed.describe() == f"stopped at the time bound, after {timed.optimizer_steps} optimizer step(s)"
    assert timed.seconds >= 0.5


# A running total kept with each step's graph, and one kept as a number: what a measured run counts.
KEPT_TOTAL = """\
import torch
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
total = 0
for step in range(4):
    loss = model(torch.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    total += loss
print("trained")
"""


@pytest.mark.parametrize(("kept", "grows"), [("loss", True), ("loss.item()", False)])
def test_a_measured_run_counts_the_graph_it_keeps_and_its_output_is_the_script_s_own(runs, tmp_path, kept, grows):
    script = tmp_path / "train.py"
    script.write_text(KEPT_TOTAL.replace("total += loss", f"total += {kept}"))
    plain = runs.runner.run(script)
    measured = runs.runner.run(script, RunOptions(measure_graphs=True))
    assert (measured.status, measured.stdout, measured.stderr) == (plain.status, plain.stdout, plain.stderr) == ("ok", "trained\n", "")
    counts = measured.live_graph_nodes
    assert len(counts) == 4 and counts[0] > 0  # (measured before each step: the step's own graph is alive)
    growth = {later - earlier for earlier, later in zip(counts, counts[1:])}
    assert growth == ({counts[1] - counts[0]} if grows else {0}) and (0 not in growth) == grows


# A helper module beside the script backwards a loss, freeing the graph the script backwards next.
HELPER = """\
def log_first_loss(first):
    first.backward()
"""
TWO_LOSSES = """\
import torch
from helper import log_first_loss

torch.manual_seed(0)
model = torch.nn.Linear(3, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
features = torch.tanh(model(torch.randn(4, 3)))
log_first_loss(features.sum())
features.pow(2).mean().backward()
"""


def test_a_failing_run_names_the_backward_that_freed_the_graph_and_what_held_it(runs, tmp_path):
    (tmp_path / "helper.py").write_text(HELPER)
    script = tmp_path / "train.py"
    script.write_text(TWO_LOSSES)
    result = runs.runner.run(script, RunOptions(detect_anomaly=True, cwd=str(tmp_path)))
    assert result.status == "error" and "second time" in result.error_message
    assert [(f.line, f.path) for f in result.freeing_frames] == [(8, ""), (2, str(tmp_path / "helper.py"))]
    assert [(f.line, f.path) for f in result.failing_frames] == [(9, "")]
    assert [f.line for f in result.forward_frames] == [7]
    assert [(h.expression, h.structure) for h in result.held_graphs] == [("features", "tensor")]
    assert result.reached_leaves == {"optimizer 0 parameter 0.0", "optimizer 0 parameter 0.1"}


def test_anomaly_mode_traces_without_raising_on_a_nan_gradient(runs, tmp_path):
    # A correct program whose backward makes a NaN gradient (and that it tolerates) runs as it
    # runs on its own: diagnose's anomaly mode is for traces, not for a NaN check.
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(1, requires_grad=True)\n(x / x).nan_to_num().sum().backward()\nprint(x.grad)\n")
    assert runs.runner.run(script, RunOptions(detect_anomaly=True, cwd=str(tmp_path))).status == "ok"


def test_a_server_started_ahead_serves_the_runs_and_one_asked_nothing_is_killed_at_close(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('ran')\n")
    with ScriptRunner() as used:
        used.start()
        assert used.run(script, RunOptions(cwd=str(tmp_path))).stdout == "ran\n"
        server = used._server
    assert server.returncode == 0  # it cleaned up after the run and left by itself
    unused = ScriptRunner()
    unused.start()
    server = unused._server
    unused.close()  # not waited for through its import of torch: it ran nothing, it leaves nothing
    assert server.returncode == -signal.SIGKILL
