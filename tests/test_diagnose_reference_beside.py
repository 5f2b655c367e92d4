"""The run with retain_graph=True that the repair search compares candidates with starts beside
the traced run (on a twin of the warm server), is what the search takes, and is stopped when no
search follows."""

import shutil
import time

from gradfix.codemods.execution.diagnose import diagnose
from gradfix.codemods.execution.repair import repair
from gradfix.codemods.execution.runner import RunBeside, RunOptions

from .test_repair_vocabulary import BOUNDS, REPAIRS


def test_the_search_compares_with_the_run_started_beside_the_traced_one(runs, tmp_path):
    script = tmp_path / "train.py"
    shutil.copy(REPAIRS / "teacher_outputs_read_by_distillation_loss.py", script)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward and diagnosis.fix is None and diagnosis.reference is not None
    beside = diagnosis.reference.result()
    # Kept every graph: it ran past the traced run's error, to the steps a search compares.
    assert beside.succeeded and beside.optimizer_steps > diagnosis.run.optimizer_steps and beside.gradients
    assert repair(diagnosis, runs.runner, BOUNDS).reference is beside


def test_no_run_is_left_beside_a_diagnosis_no_search_follows(runs, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nw = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n")
    assert diagnose(script, runs.runner, BOUNDS).reference is None


def test_a_run_beside_is_killed_when_stopped(runs, tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import os, time\nopen('script.pid', 'w').write(str(os.getpid()))\ntime.sleep(300)\n")
    beside = RunBeside(runs.runner, script, RunOptions(timeout=600, cwd=str(tmp_path)))
    marker = tmp_path / "script.pid"
    while not (marker.exists() and marker.read_text()):
        time.sleep(0.05)
    beside.stop()
    assert beside.result().status == "crashed" and "signal 9" in beside.result().error_message
