"""A tensor method called through its class, ``torch.Tensor.detach(fake)``, is that method called on
its first argument: h92's metamorphic tester respelled ``fake.detach()`` so and got default GF002
and GF007 findings on correct programs, the call read as a torch function that hands on its
argument's graph. A method gradfix models by name (``detach``, ``item``) tells the value; any other
(``clone``) still hands the graph on."""

import pytest

from .one_program import findings_of, run_error

GAN = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
G, D = nn.Linear(2, 3), nn.Linear(3, 1)
opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
for step in range(3):
    real = torch.randn(4, 3)
    fake = G(torch.randn(4, 2))
    g_loss = -D(fake).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    d_loss = D(SEEN).mean() - D(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
"""

HISTORY = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
x, y = torch.randn(5, 3), torch.randn(5, 1)
history = []
for step in range(4):
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    history.append(KEPT)
"""


@pytest.mark.parametrize(
    ("seen", "fails"),
    [("fake.detach()", False), ("torch.Tensor.detach(fake)", False), ("torch.Tensor.clone(fake)", True), ("fake", True)],
)
def test_a_discriminator_step_on_the_generator_s_output_detached_through_the_class(seen, fails, runs, tmp_path):
    source = GAN.replace("SEEN", seen)
    assert ("backward through the graph a second time" in run_error(runs, tmp_path, source)) is fails
    assert bool(findings_of(source, "GF002", "GF005", "GF010", hints=False)) is fails


@pytest.mark.parametrize(
    ("kept", "keeps"),
    [("loss.detach()", False), ("torch.Tensor.detach(loss)", False), ("torch.Tensor.item(loss)", False), ("torch.Tensor.clone(loss)", True)],
)
def test_a_loss_kept_detached_through_the_class_keeps_no_graph(kept, keeps, runs, tmp_path):
    source = HISTORY.replace("KEPT", kept) + f"assert any(getattr(h, 'grad_fn', None) is not None for h in history) is {keeps}\n"
    assert run_error(runs, tmp_path, source) == ""
    assert bool(findings_of(source, "GF007", hints=False)) is keeps
