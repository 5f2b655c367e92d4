"""`%load_ext gradfix` on a backward that fails inside a module beside the notebook: the answer
names the module's line, its calls and loop, and the module's rule, and shows (does not apply)
the rule's fix of the module. The module's shape is rebuilt from the report on its first line."""

from gradfix.codemods.symptoms import SECOND_BACKWARD

from .test_ipython import start_kernel  # noqa: F401 (the kernel fixture)

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

SETUP = """\
import torch
from training import train
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)"""


def test_a_failure_in_a_module_is_explained_by_the_modules_lines_and_rule(start_kernel, tmp_path):
    kernel = start_kernel(["%load_ext gradfix", "%gradfix anomaly on"])
    (kernel.folder / "training.py").write_text(TRAINING)
    assert not kernel.run(SETUP).errors
    failing = kernel.run("train(model, optimizer, [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(3)])")
    assert [name for name, _ in failing.errors] == ["RuntimeError"] and SECOND_BACKWARD.text in failing.errors[0][1]
    # Called once from the cell, the backward at the module's line 10 failed on its first call.
    assert "failed at  training.py line 10: loss.backward()   (on its 1st call, in the loop at training.py line 6)\n" in failing.stdout
    assert "rule: GF001 duplicate_backward: `loss` is backwarded again (first at training.py line 9)" in failing.stdout
    assert "No gradfix finding names the lines above" not in failing.stdout
    assert "-        loss.backward()\n" in failing.stdout
    assert f"it changes {kernel.folder / 'training.py'}, not a cell: gradfix does not apply it here." in failing.stdout
    assert (kernel.folder / "training.py").read_text() == TRAINING
