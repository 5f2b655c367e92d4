"""A value stored on the object is computed again where it is read only from names that mean the
same there: BicycleGAN's ``forward(self, a)`` stores ``self.fake = self.gen(cat([a, self.z]))``,
and ``diagnose --fix`` copied that expression into the methods that read ``self.fake``, where
``a`` is no parameter: it named the script's global loop variable ``a``, which happened to hold the
same batch, so the runs agreed and the rewrite was written as safe (h105's review). A name the
computing method binds is not available in another method, whatever the module binds; an
expression of the object's attributes is."""

import pytest

from gradfix.codemods.execution.diagnose import diagnose
from gradfix.codemods.execution.repair import repair
from gradfix.codemods.execution.runner import RunOptions

torch = pytest.importorskip("torch")

BOUNDS = RunOptions(timeout=60)
RECOMPUTED = "compute `self.fake` (stored from line 18) again where it is read"

BICYCLE = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class BicycleGAN:
    def __init__(self):
        self.gen = nn.Linear(6, 4)
        self.enc = nn.Linear(4, 2)
        self.disc = nn.Linear(4, 1)
        self.opt_eg = torch.optim.Adam(list(self.gen.parameters()) + list(self.enc.parameters()), lr=1e-3)
        self.opt_d = torch.optim.Adam(self.disc.parameters(), lr=1e-3)

    def forward(self, a):
        self.a = a
        self.z = torch.randn(a.size(0), 2)
        self.fake = self.gen(torch.cat([INPUT, self.z], 1))

    def backward_eg(self):
        loss = -self.disc(self.fake).mean()
        loss.backward()

    def backward_latent(self):
        loss = (self.enc(self.fake) - self.z).abs().mean()
        loss.backward()

    def optimize(self, a):
        self.forward(a)
        self.opt_eg.zero_grad()
        self.backward_eg()
        self.backward_latent()
        self.opt_eg.step()


model = BicycleGAN()
for a in [torch.randn(8, 4) for _ in range(3)]:
    model.optimize(a)
"""


def searched(runs, tmp_path, fed: str):
    script = tmp_path / "train.py"
    script.write_text(BICYCLE.replace("INPUT", fed))
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward
    return repair(diagnosis, runs.runner, BOUNDS)


def test_a_parameter_of_the_computing_method_is_not_read_elsewhere(runs, tmp_path):
    result = searched(runs, tmp_path, "a")
    assert RECOMPUTED not in [attempt.candidate.description for attempt in result.attempts]


def test_the_objects_own_attributes_are_read_anywhere(runs, tmp_path):
    chosen = searched(runs, tmp_path, "self.a").chosen
    assert chosen is not None and chosen.candidate.description == RECOMPUTED and chosen.safe
