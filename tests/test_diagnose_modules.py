"""A backward that fails inside a module beside the script: the failing line, its calls, its loop,
how the two lines relate and the matching rule are the module's, and the rule's fix is written to
the module (the first line of ``TRAINING`` names the public report the shape was rebuilt from)."""

from pathlib import Path

from gradfix.cli.render import diagnosis_lines
from gradfix.codemods.execution.diagnose import diagnose, fix_and_rerun
from gradfix.codemods.execution.runner import RunOptions

BOUNDS = RunOptions(timeout=60)

TRAINING = """\
# https://github.com/huggingface/trl/issues/130
import torch.nn.functional as F


def train(model, optimizer, batches):
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        loss.backward()
        optimizer.step()
"""

SCRIPT = """\
import torch
from training import train

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train(model, optimizer, [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)])
print("CHECKSUM", sum(p.sum().item() for p in model.parameters()))
"""


def project(folder: Path) -> tuple[Path, Path]:
    (folder / "training.py").write_text(TRAINING)
    (folder / "train.py").write_text(SCRIPT)
    return folder / "train.py", folder / "training.py"


def test_the_lines_loop_and_rule_of_a_failure_in_a_module_are_the_modules(runs, tmp_path):
    script, module = project(tmp_path)
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward
    # The script calls train() once: the backward that failed ran once, in the module's loop.
    assert diagnosis_lines(diagnosis, diagnosis.describe)[:2] == [
        "  failed at  training.py line 10: loss.backward()   (on its 1st call, in the loop at training.py line 6)",
        "  graph from training.py line 8: loss = F.mse_loss(model(x), y)",
    ]
    assert diagnosis.relation == "the same tensor was already backwarded at training.py line 9"
    assert diagnosis.finding.code == "GF001" and "training.py line 9" in diagnosis.finding.message
    assert diagnosis.module == module and diagnosis.fix.path == str(module)
    assert diagnosis.diff(diagnosis.fix.rewritten).startswith("--- a/")
    again = fix_and_rerun(diagnosis, runs.runner, BOUNDS)
    assert diagnosis.confirmed_by(again)[0], again.describe()
    assert module.read_text() == TRAINING.replace("        loss.backward()\n        loss.backward()\n", "        loss.backward()\n")
    assert script.read_text() == SCRIPT
