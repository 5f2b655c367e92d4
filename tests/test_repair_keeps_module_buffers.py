"""A repair is safe only where it keeps what the original with ``retain_graph=True`` computes, and
the model is more than its gradients: a forward run once more updates a batch norm's running
statistics. A WGAN-GP critic trained twice per generator step on a fake stored once
(DeblurGAN's shape, h101's review): computing the fake again where it is read gives the
generator's and the critic's gradients of the original, so the search called it safe, but each
extra forward of the generator moved its batch norm's statistics (six forwards a step instead of
one). The buffers of the script's modules are recorded at each optimizer step and compared with
the gradients: that candidate changes the maths. Without the batch norm, the same candidate is
safe."""

import pytest

from gradfix.codemods.execution.diagnose import diagnose
from gradfix.codemods.execution.recording import module_buffers
from gradfix.codemods.execution.repair import repair
from gradfix.codemods.execution.runner import RunOptions

torch = pytest.importorskip("torch")

BOUNDS = RunOptions(timeout=60)

DEBLUR = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Critic:
    def penalty(self, critic, real, fake):
        alpha = torch.rand(real.size(0), 1)
        mixed = alpha * real + (1 - alpha) * fake
        grads = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)[0]
        return 10 * ((grads.norm(2, dim=1) - 1) ** 2).mean()

    def d_loss(self, critic, real, fake):
        return critic(fake.detach()).mean() - critic(real).mean() + self.penalty(critic, real, fake)


class Deblur:
    def __init__(self):
        self.netG = nn.Sequential(nn.Linear(4, 8), NORM, nn.Tanh(), nn.Linear(8, 4))
        self.netD = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.opt_G = torch.optim.Adam(self.netG.parameters(), lr=1e-3)
        self.opt_D = torch.optim.Adam(self.netD.parameters(), lr=1e-3)
        self.critic = Critic()

    def forward(self, blurred):
        self.blurred = blurred
        self.fake = self.netG(self.blurred)

    def backward_D(self, sharp):
        self.loss_D = self.critic.d_loss(self.netD, sharp, self.fake)
        self.loss_D.backward()

    def backward_G(self, sharp):
        self.loss_G = -self.netD(self.fake).mean() + ((self.fake - sharp) ** 2).mean()
        self.loss_G.backward()

    def optimize(self, blurred, sharp):
        self.forward(blurred)
        for _ in range(2):
            self.opt_D.zero_grad()
            self.backward_D(sharp)
            self.opt_D.step()
        self.opt_G.zero_grad()
        self.backward_G(sharp)
        self.opt_G.step()


model = Deblur()
for step in range(3):
    model.optimize(torch.randn(8, 4), torch.randn(8, 4))
"""


def chosen_repair(runs, tmp_path, norm: str):
    script = tmp_path / "train.py"
    script.write_text(DEBLUR.replace("NORM", norm))
    diagnosis = diagnose(script, runs.runner, BOUNDS)
    assert diagnosis.second_backward and diagnosis.fix is None
    chosen = repair(diagnosis, runs.runner, BOUNDS).chosen
    assert chosen is not None and chosen.candidate.description == "compute `self.fake` (stored from line 28) again where it is read"
    return chosen


def test_computing_a_fake_again_through_a_batch_norm_changes_the_maths(runs, tmp_path):
    chosen = chosen_repair(runs, tmp_path, "nn.BatchNorm1d(8)")
    assert not chosen.safe and "running_mean buffer" in chosen.gradient_difference


def test_without_running_statistics_the_same_repair_is_safe(runs, tmp_path):
    assert chosen_repair(runs, tmp_path, "nn.Identity()").safe


def test_the_buffers_of_modules_a_global_object_holds_are_recorded():
    class Wrapper:
        def __init__(self):
            self.net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))

    class Refusing:  # (a script's object that refuses every attribute: recorded around, never raised into the run)
        def __getattribute__(self, name):
            raise RuntimeError(name)

    recorded = module_buffers({"model": Wrapper(), "head": torch.nn.BatchNorm1d(3), "torch": torch, "proxy": Refusing()})
    assert [label for label, _ in recorded] == [
        "head.running_mean buffer", "head.running_var buffer", "head.num_batches_tracked buffer",
        "model.net.1.running_mean buffer", "model.net.1.running_var buffer", "model.net.1.num_batches_tracked buffer",
    ]  # fmt: skip
