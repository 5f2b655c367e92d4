"""``accelerator.prepare(model, optimizer, loader)`` (and Fabric's ``setup``) hands back what it is
given, position for position, wrapped: a module, an optimizer, a loader, none of which holds a
graph. gradfix read its result as code it did not read, given a trainable module, and so as a graph
built from the module's parameters: the modules and loaders a trainer keeps on ``self`` were
"built once from parameters that train" (13 false GF003 and GF006 hints on audiolm's and
muse-maskgit's trainers, h95's review). A forward of the prepared module made once before the loop
is still found; what an object gradfix does not know hands back is still a guess."""

from .one_program import findings_of, run_error

TRAINER = """\
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def cycle(dl):
    while True:
        for data in dl:
            yield data


class Trainer(nn.Module):
    def __init__(self, model, steps):
        super().__init__()
        self.accelerator = Accelerator(cpu=True)
        self.model = model
        self.optim = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.dl = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
        self.model, self.optim, self.dl = PREPARE(self.model, self.optim, self.dl)
        self.dl_iter = cycle(self.dl)
        self.steps = steps

    def train_step(self):
        x, y = next(self.dl_iter)
        loss = (self.model(x) - y).pow(2).mean()
        self.accelerator.backward(loss)
        self.optim.step()
        self.optim.zero_grad()

    def train(self):
        for _ in range(self.steps):
            self.train_step()


Trainer(nn.Linear(4, 1), 3).train()
"""


def test_what_prepare_hands_back_holds_no_graph(runs, tmp_path):
    source = TRAINER.replace("PREPARE", "self.accelerator.prepare")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003", "GF006") == []


def test_what_an_object_gradfix_does_not_know_hands_back_is_still_a_guess():
    source = TRAINER.replace("PREPARE", "self.accelerator.prepare").replace("Accelerator(cpu=True)", "make_accelerator()")
    source = source.replace("from accelerate import Accelerator\n", "from tools import make_accelerator\n")
    found = findings_of(source, "GF003", "GF006")
    assert found and all(f.hint for f in found)


STALE = """\
import torch
import torch.nn as nn
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
out = model(torch.randn(8, 4))
for step in range(3):
    loss = out.pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_forward_of_the_prepared_module_made_once_is_still_found(runs, tmp_path):
    assert "backward through the graph a second time" in run_error(runs, tmp_path, STALE)
    assert [(f.code, f.hint) for f in findings_of(STALE, "GF003")] == [("GF003", False)]
