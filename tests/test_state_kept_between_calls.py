"""State a module keeps on ``self`` between calls (GF004): where a module holding it sets it afresh
in its own forward (``self.dec.M, self.dec.H = self.enc(x)``, threelittlemonkeys' seq2seq: the
decoder's GRU state lives between the time steps of one sequence), the user manages it, and nothing
is reported; a module's forward counts as called where the module is. Where a loop calls the module
several times before the step's one backward (a decoder's time steps), detaching the state at every
call would cut the step's own gradient through its earlier calls: the fix is unsafe (h96's review:
the safe detach of the seq2seq decoder's state changed the encoder's gradients). Called once a step,
the detach is what the program means, and safe."""

from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

CELL = """\
import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNNCell(3, 4)
        self.h = torch.zeros(2, 4)

    def forward(self, x):
        h = self.rnn(x, self.h)
        self.h = h
        return h


class Owner(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = Cell()

    def forward(self, xs):
        RESET
        return sum(self.cell(x).pow(2).mean() for x in xs)


torch.manual_seed(0)
model = MODEL
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    xs = [torch.randn(2, 3) for t in range(4)]
    CALLS
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"
ONCE = "loss = model(xs[0]).pow(2).mean()"
SEVERAL = "loss = 0\n    for x in xs:\n        loss = loss + model(x).pow(2).mean()"


def test_state_the_owner_sets_afresh_in_its_forward_is_managed(runs, tmp_path):
    source = CELL.replace("RESET", "self.cell.h = torch.zeros(2, 4)").replace("MODEL", "Owner()").replace("CALLS", "loss = model(xs)")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_state_kept_across_steps_called_several_times_a_step_is_an_unsafe_fix(runs, tmp_path):
    source = CELL.replace("RESET", "pass").replace("MODEL", "Cell()").replace("CALLS", SEVERAL)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF004", mode=FixMode.UNSAFE)
    assert not finding.hint and "calls it several times between two backwards" in finding.message
    assert findings_of(source, "GF004", mode=FixMode.SAFE)[0].message == finding.message  # (found, not fixed safely)


def test_state_kept_across_steps_called_once_a_step_is_a_safe_fix(runs, tmp_path):
    source = CELL.replace("RESET", "pass").replace("MODEL", "Cell()").replace("CALLS", ONCE)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert not finding.hint and "several times" not in finding.message


def test_an_evaluation_loop_with_gradients_off_calls_it_without_keeping_graphs(runs, tmp_path):
    evaluated = "with torch.no_grad():\n    for x in [torch.randn(2, 3) for t in range(4)]:\n        model(x)\n"
    source = CELL.replace("RESET", "pass").replace("MODEL", "Cell()").replace("CALLS", ONCE) + evaluated
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert "several times" not in finding.message
