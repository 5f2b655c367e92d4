"""A graph kept where other code of the file reads it later is not free to drop (h89's generator,
which broke 41 of GF009's and 16 of GF007's safe rewrites on correct programs). GF009 read as
"read later" only the names a nested function or a lambda takes from the scope around it; it
missed a module global a function of the file reads (``def extra_pass(): loss.backward()``), a
module-level container a function fills (``KEPT["loss"] = loss``) and another reads, a nested
function's default (``def extra_pass(t=loss)``), and a node of the graph called through
autograd's bookkeeping (``loss.grad_fn.next_functions``). GF007 read a list as held by one name
where a chained assignment (``kept = KEPT = []``) or a parameter's default (``def
finish(store=kept)``) gives it another. Each of those programs runs, and fails once the retained
graph is dropped or the stored losses detached; none is rewritten now. The variants where nothing
else reads the graph are still fixed, and run."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import run_error

SECOND_BACKWARD = "backward through the graph a second time"

GLOBAL_READ = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)


def extra_pass():
    (0.5 * EXTRA).backward()


for step in range(3):
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    extra_pass()
    opt.step()
"""

# A ``main()`` whose loop keeps each step's loss where ``extra_pass`` backwards it again (KEEP).
MAIN = """\
def main():
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        loss = net(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
KEEP
        loss.backward(retain_graph=True)
        extra_pass()
        opt.step()


main()
"""
HEADER = "import torch\nimport torch.nn as nn\n\ntorch.manual_seed(0)\n"
GLOBAL_CONTAINER = (
    HEADER + 'KEPT = {}\n\n\ndef extra_pass():\n    (0.5 * KEPT["loss"]).backward()\n\n\n' + MAIN.replace("KEEP", '        KEPT["loss"] = loss')
)
DEFAULT_ARGUMENT = HEADER + "\n\n" + MAIN.replace("KEEP", "\n        def extra_pass(t=loss):\n            (0.5 * t).backward()\n")

NODE_CALLED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 2)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    node = loss.grad_fn.next_functions[0][0]
    print(node(torch.ones(8, 2)).abs().sum().item())
    opt.step()
"""

KEPT_LOSSES = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
head, body = nn.Linear(4, 1), nn.Linear(4, 1)
opt_h = torch.optim.SGD(head.parameters(), lr=0.1)
opt_b = torch.optim.SGD(body.parameters(), lr=0.1)
STORE
for step in range(4):
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    lh = F.mse_loss(head(x), y)
    opt_h.zero_grad()
    lh.backward()
    opt_h.step()
    kept.append(F.mse_loss(body(x), y))


def finish(SIGNATURE):
    opt_b.zero_grad()
    torch.stack(READ).mean().backward()
    opt_b.step()


finish()
"""


def _safe_fixes(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


@pytest.mark.parametrize(
    "source",
    [GLOBAL_READ.replace("EXTRA", "loss"), GLOBAL_CONTAINER, DEFAULT_ARGUMENT, NODE_CALLED],
    ids=["global-read-by-a-function", "global-container", "default-argument", "node-called"],
)
def test_a_retained_graph_other_code_reads_later_is_kept(source, runs, tmp_path):
    assert run_error(runs, tmp_path, source) == ""
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source.replace("retain_graph=True", ""))
    report = _safe_fixes(source)
    assert "GF009" not in [f.code for f in report.fixed] and report.rewritten is None


def test_a_retained_graph_no_function_reads_is_dropped(runs, tmp_path):
    # (the function builds a graph of its own: nothing reads the global ``loss`` again)
    source = GLOBAL_READ.replace("EXTRA", "net(torch.randn(8, 4)).pow(2).mean()")
    report = _safe_fixes(source)
    assert [f.code for f in report.fixed] == ["GF009"]
    assert run_error(runs, tmp_path, report.rewritten.decode()) == ""


@pytest.mark.parametrize(
    ("store", "signature", "read"),
    [
        ("kept = KEPT = []", "", "KEPT"),  # two names of one list, from one statement
        ("kept = []", "store=kept", "store"),  # the list held by the function as its default
    ],
    ids=["chained-assignment", "default-argument"],
)
def test_losses_kept_in_a_list_another_name_backwards_are_not_detached(store, signature, read, runs, tmp_path):
    source = KEPT_LOSSES.replace("STORE", store).replace("SIGNATURE", signature).replace("READ", read)
    assert run_error(runs, tmp_path, source) == ""
    assert "does not require grad" in run_error(runs, tmp_path, source.replace("y))\n\n", "y).detach())\n\n"))
    report = _safe_fixes(source)
    assert "GF007" not in [f.code for f in report.fixed] and report.rewritten is None


def test_losses_kept_in_a_list_no_other_name_holds_are_detached(runs, tmp_path):
    source = KEPT_LOSSES.replace("STORE", "kept = []\nother = [torch.zeros(1, requires_grad=True)]").replace("SIGNATURE", "").replace("READ", "other")
    report = _safe_fixes(source)
    assert [f.code for f in report.fixed] == ["GF007"]
    assert run_error(runs, tmp_path, report.rewritten.decode()) == ""
