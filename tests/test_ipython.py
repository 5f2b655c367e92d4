"""`%load_ext gradfix` in a real IPython kernel, driven by nbclient as Jupyter drives it: a cell that
raises "backward through the graph a second time" shows the explanation and the fix below its
traceback, `%gradfix fix` sends the fixed code back as the cell's new input (the set_next_input
payload a notebook applies), and that code runs. Two kernels for the module: starting one and
importing torch in it costs seconds."""

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

SECOND_BACKWARD = "Trying to backward through the graph a second time"

SETUP = """\
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
inputs, targets = torch.randn(16, 4), torch.randn(16, 1)"""

TRAIN = """\
predictions = model(inputs)
for step in range(3):
    loss = nn.functional.mse_loss(predictions, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained", step)"""

TRAIN_FIXED = """\
for step in range(3):
    predictions = model(inputs)
    loss = nn.functional.mse_loss(predictions, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained", step)"""


@dataclass
class Cell:
    count: int
    stdout: str = ""
    stderr: str = ""
    errors: list[tuple[str, str]] = field(default_factory=list)
    payloads: list[dict] = field(default_factory=list)


class Kernel:
    """A kernel that runs cells appended to a notebook one at a time, as a user runs them."""

    def __init__(self, client: NotebookClient, folder: Path) -> None:
        self.client, self.folder = client, folder
        self.replies: list[dict] = []
        client.on_cell_executed = lambda cell, cell_index, execute_reply: self.replies.append(execute_reply)

    def run(self, source: str) -> Cell:
        cells = self.client.nb.cells
        cells.append(nbformat.v4.new_code_cell(source))
        self.client.execute_cell(cells[-1], len(cells) - 1)
        reply = self.replies[-1]["content"]
        ran = Cell(reply["execution_count"], payloads=reply.get("payload", []))
        for output in cells[-1].outputs:
            if output.output_type == "stream":
                setattr(ran, output.name, getattr(ran, output.name) + output.text)
            elif output.output_type == "error":
                ran.errors.append((output.ename, output.evalue))
        return ran


@pytest.fixture(scope="module")
def start_kernel(tmp_path_factory):
    with contextlib.ExitStack() as running:

        def start(first_cells: list[str]) -> Kernel:
            """A kernel whose working folder is a new empty one, after ``first_cells`` ran without error."""
            folder = tmp_path_factory.mktemp("kernel")
            client = NotebookClient(
                nbformat.v4.new_notebook(),
                kernel_name="python3",
                allow_errors=True,
                timeout=120,
                shutdown_kernel="immediate",
                resources={"metadata": {"path": str(folder)}},
            )
            running.enter_context(client.setup_kernel())
            kernel = Kernel(client, folder)
            for source in first_cells:
                assert not kernel.run(source).errors
            return kernel

        yield start


@pytest.fixture(scope="module")
def kernel(start_kernel):
    # A handler another extension installed before gradfix keeps the errors it handled.
    before_gradfix = """\
def earlier_handler(shell, etype, value, tb, tb_offset=None):
    print("the earlier handler saw", etype.__name__)
get_ipython().set_custom_exc((ValueError,), earlier_handler)"""
    return start_kernel([before_gradfix, "%load_ext gradfix", SETUP])


def test_the_failing_cell_shows_the_explanation_and_the_fix_and_the_fixed_cell_runs(kernel):
    failing = kernel.run(TRAIN)
    n = failing.count
    assert [name for name, _ in failing.errors] == ["RuntimeError"] and SECOND_BACKWARD in failing.errors[0][1]
    assert f"failed at  In [{n}], line 5: loss.backward()   (in the loop at In [{n}], line 2)\n" in failing.stdout
    assert f"rule: GF003 forward_outside_loop: `predictions` is computed once before the loop at In [{n}], line 2" in failing.stdout
    diff = f"""\
--- In [{n}]
+++ In [{n}], fixed
@@ -1,5 +1,5 @@
-predictions = model(inputs)
 for step in range(3):
+    predictions = model(inputs)
"""
    assert diff in failing.stdout
    assert "`%gradfix fix` in a new cell" in failing.stdout
    assert "`%gradfix anomaly on`" in failing.stdout, "without anomaly mode the line that built the graph is unknown"

    fix = kernel.run("%gradfix fix")
    assert fix.payloads == [{"source": "set_next_input", "text": TRAIN_FIXED, "replace": True}]
    rerun = kernel.run(fix.payloads[0]["text"])
    assert rerun.errors == [] and rerun.stdout == "trained 2\n"


def test_other_errors_are_shown_as_before(kernel):
    other = kernel.run("raise RuntimeError('not about graphs')")
    assert other.errors == [("RuntimeError", "not about graphs")] and other.stdout == ""
    handled_before = kernel.run("raise ValueError('for the earlier handler')")
    assert handled_before.stdout == "the earlier handler saw ValueError\n"


def test_anomaly_mode_names_the_line_that_built_the_graph_and_a_cell_run_twice(kernel):
    assert "anomaly mode is on" in kernel.run("%gradfix anomaly on").stdout
    built = kernel.run("score = nn.functional.mse_loss(model(inputs), targets)")
    first = kernel.run("score.backward()")
    again = kernel.run("score.backward()")
    assert first.errors == [] and [name for name, _ in again.errors] == ["RuntimeError"]
    assert f"graph from In [{built.count}], line 1: score = nn.functional.mse_loss(model(inputs), targets)\n" in again.stdout
    assert f"rule: GF001 duplicate_backward: `score` is backwarded again (first at In [{first.count}], line 1)" in again.stdout
    assert (
        f"In [{again.count}] runs the code of In [{first.count}] again: that run's backward freed the graph, which "
        f"In [{built.count}] built." in again.stdout
    )
    assert "%gradfix fix" not in again.stdout, "removing the backward of a cell run twice is no fix"
    assert "no fix to apply" in kernel.run("%gradfix fix").stderr

    off = kernel.run("%gradfix anomaly off\nprint(torch.is_anomaly_enabled(), torch.autograd.backward.__module__)")
    assert off.stdout == "gradfix: anomaly mode is off.\nFalse torch.autograd\n"


def test_unloading_gives_the_errors_back_to_the_handlers_before_it(kernel):
    # (its own graph: the module's kernel may have run no other test first, on another worker)
    kernel.run("spent = nn.functional.mse_loss(model(inputs), targets)\nspent.backward()")
    kernel.run("%unload_ext gradfix")
    unexplained = kernel.run("spent.backward()")
    assert [name for name, _ in unexplained.errors] == ["RuntimeError"] and unexplained.stdout == ""
    assert kernel.run("raise ValueError('for the earlier handler')").stdout == "the earlier handler saw ValueError\n"
    assert "UsageError: Line magic function `%gradfix` not found" in kernel.run("%gradfix anomaly on").stderr
    kernel.run("%load_ext gradfix")


# A value built once in __init__ from a parameter: the rule (GF006) reports it and proves no rewrite.
CACHED_SCALE = """\
import torch
from torch import nn
torch.manual_seed(0)

class ScaledLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.scale = torch.exp(nn.Parameter(torch.zeros(1)))

    def forward(self, x):
        return self.linear(x) * self.scale

model = ScaledLinear()
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
inputs, targets = torch.randn(16, 4), torch.randn(16, 1)"""

EPOCHS = """\
for epoch in range(3):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    optimizer.step()
print("trained", epoch)"""


def test_diagnose_runs_the_cells_elsewhere_and_its_proven_fix_runs_in_the_kernel(start_kernel):
    kernel = start_kernel(["%load_ext gradfix", CACHED_SCALE])
    failing = kernel.run(EPOCHS)
    n = failing.count
    # Without anomaly mode only the backward's line is known, and no finding names it.
    assert "  No gradfix finding names the lines above.\n" in failing.stdout
    assert "gradfix finds these shapes that raise this error:\n    In [2], line 9: GF006 `self.scale` is built once" in failing.stdout
    assert "no fix to apply" in kernel.run("%gradfix fix").stderr
    kernel.run("weights_after_the_error = model.linear.weight.detach().clone()")

    diagnosed = kernel.run("%gradfix diagnose")
    assert diagnosed.errors == [], diagnosed.stderr
    assert f"gradfix ran In [1] to In [{n}] in a separate process, with anomaly mode:\n" in diagnosed.stdout
    assert f"failed at  In [{n}], line 4: loss.backward()   (on its 2nd call, in the loop at In [{n}], line 1)\n" in diagnosed.stdout
    assert "graph from In [2], line 9: self.scale = torch.exp(nn.Parameter(torch.zeros(1)))\n" in diagnosed.stdout
    assert "[chosen] detach the value where it is stored (In [2], line 9): runs clean; gradients equal" in diagnosed.stdout
    assert "+        self.scale = torch.exp(nn.Parameter(torch.zeros(1))).detach()\n" in diagnosed.stdout
    untouched = kernel.run("print(torch.equal(model.linear.weight, weights_after_the_error))")
    assert untouched.stdout == "True\n", "the cells ran in another process, not in the kernel"
    assert [path.name for path in kernel.folder.iterdir()] == [], "the script diagnose ran is removed"

    fix = kernel.run("%gradfix fix")
    fixed_code = fix.payloads[0]["text"]
    fixed_definitions = CACHED_SCALE.replace("torch.zeros(1)))", "torch.zeros(1))).detach()")
    assert fixed_code == f"# In [2], fixed by gradfix\n{fixed_definitions}\n\n# In [{n}]\n{EPOCHS}"
    rerun = kernel.run(fixed_code)
    assert rerun.errors == [] and rerun.stdout == "trained 2\n"

    # The script is created, never written through what is already there under its name.
    pid = kernel.run("import os\nprint(os.getpid())").stdout.strip()
    target = kernel.folder / "notes.txt"
    target.write_text("mine\n")
    (kernel.folder / f".gradfix-kernel-{pid}.py").symlink_to(target)
    refused = kernel.run("%gradfix diagnose")
    assert "gradfix cannot write the script it runs in the working folder" in refused.stderr
    assert target.read_text() == "mine\n"
