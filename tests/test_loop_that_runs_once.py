"""A loop that runs once at most (``for i in range(1):``, AdvGAN's discriminator and generator
steps in Ma-Ruinan/AI-security-homework, h106) has no iteration after the first: the generator's
output made before the generator's loop is backwarded there once, while it is fresh, and nothing
is carried into a next iteration. GF003 and GF010 reported it. The same loops run twice fail, and
are reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
netG = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
netD = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
optimizer_G = torch.optim.Adam(netG.parameters(), lr=0.001)
optimizer_D = torch.optim.Adam(netD.parameters(), lr=0.001)


def train_batch(x):
    for i in range(RUNS):
        perturbation = netG(x)
        adv = torch.clamp(perturbation, -0.3, 0.3) + x
        optimizer_D.zero_grad()
        pred_fake = netD(adv.detach())
        F.mse_loss(pred_fake, torch.zeros_like(pred_fake)).backward()
        optimizer_D.step()
    for i in range(RUNS):
        optimizer_G.zero_grad()
        pred_fake = netD(adv)
        loss_G = F.mse_loss(pred_fake, torch.ones_like(pred_fake)) + perturbation.norm()
        loss_G.backward()
        optimizer_G.step()
    return loss_G.item()


for step in range(3):
    print(round(train_batch(torch.rand(5, 4)), 5))
"""


@pytest.mark.parametrize("runs_", ["1", "0, 1"])
def test_a_loop_that_runs_once_backwards_what_was_built_before_it_once(runs_, runs, tmp_path):
    source = PROGRAM.replace("RUNS", runs_)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003", "GF010", "GF004") == []


def test_the_same_loops_run_twice_are_reported(runs, tmp_path):
    source = PROGRAM.replace("RUNS", "2")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert any(not f.hint for f in findings_of(source, "GF003", "GF010"))
