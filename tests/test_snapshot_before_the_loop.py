"""A value a module makes once before the loop, which the loop's loss reads beside the same call made
afresh (``net(old_x)`` in both), may be meant as the network's outputs before training: learning without
forgetting's distillation targets, missing their detach (h82, from GradientEpisodicMemory's iCaRL).
Moved into the loop, as GF003 moves a forward, the term would compare the network with itself, so
GF003 does not rewrite it; nor where the loss puts the targets against another forward of the same
network (``net(new_x)``), which may mean them as the outputs before training too (GF003's
``_computed_in_the_loop_too``)."""

import subprocess
import sys

import gradfix

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.5)
old_x = torch.randn(32, 3)
new_x, new_y = torch.randn(32, 3), torch.randint(0, 4, (32,))
kl = nn.KLDivLoss(reduction="batchmean")

old_targets = F.softmax(net(old_x), dim=1)
for step in range(50):
    loss = F.cross_entropy(net(new_x), new_y) + 10.0 * kl(F.log_softmax(STUDENT, dim=1), old_targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(float(kl(F.log_softmax(net(old_x), dim=1), F.softmax(net(old_x), dim=1))))
"""


def _gf003(source: str) -> list[str | None]:
    return [f.fix and f.fix.value for f in gradfix.check(source).findings if f.code == "GF003"]


def _last_distillation_term(source: str) -> float:
    """The distillation term against the targets the program last made, after training."""
    end = "print(float(kl(F.log_softmax(net(old_x), dim=1), old_targets)))"
    lines = source.splitlines()
    done = subprocess.run([sys.executable, "-c", "\n".join([*lines[:-1], end])], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_targets_the_loop_computes_afresh_beside_are_not_moved():
    source = PROGRAM.replace("STUDENT", "net(old_x)")
    assert subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode != 0  # (the freed graph)
    assert _gf003(source) == [None]
    # Why: moved (by hand here), the targets are the network's own outputs and the term is KL(p || p),
    # near zero; detached where they are made, they hold the old task (the intended fix).
    made = "old_targets = F.softmax(net(old_x), dim=1)\n"
    moved = source.replace(made, "").replace("    loss = ", f"    {made}    loss = ")
    assert _last_distillation_term(moved) < 1e-4 < 1e-3 < _last_distillation_term(source.replace(made, made.replace(")\n", ").detach()\n")))


def test_the_variant_against_another_forward_of_the_network_is_not_moved_either():
    """The loss puts the targets against another forward of the same network (`net(new_x)`): no
    call is made twice, but the targets may still be meant as the outputs before training."""
    assert _gf003(PROGRAM.replace("STUDENT", "net(new_x)")) == [None]
