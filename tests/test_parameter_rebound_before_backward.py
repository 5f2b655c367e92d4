"""A function that binds its parameter again before it backwards it backwards what its body made,
not what its caller passed (h92's metamorphic tester: a critic step moved into a function that takes
the previous `loss_d` and rebinds it from the detached fake before its backward). Its summary said
it backwarded the caller's argument, and GF010 reported the generator's backward as walking a graph
that backward freed; the program runs. Rebound after the backward, the caller's argument is what it
backwards, and the generator's graph is freed: that program fails; so does one that binds it again
from itself (``loss_d = loss_d * 2``) before the backward."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
gen, critic = nn.Linear(3, 3), nn.Linear(3, 1)
opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)


def critic_step(loss_d, fake, real):
BODY    return loss_d


for batch in range(3):
    real = torch.randn(4, 3)
    fake = gen(torch.randn(4, 3))
    loss_d = critic_step(critic(fake).mean() - critic(real).mean(), fake, real)
    loss_g = -critic(fake).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
"""

REBIND = "    loss_d = critic(fake.detach()).mean() - critic(real).mean()\n"
STEP = "    opt_c.zero_grad()\n    loss_d.backward()\n    opt_c.step()\n"


# (bound again from itself, it still holds the caller's graph)
DERIVED = "    loss_d = loss_d * 2\n"


@pytest.mark.parametrize(("body", "fails"), [(REBIND + STEP, False), (STEP + REBIND, True), (DERIVED + STEP, True)])
def test_a_parameter_bound_again_before_its_backward_is_not_the_caller_s(body, fails, runs, tmp_path):
    source = PROGRAM.replace("BODY", body)
    assert ("backward through the graph a second time" in run_error(runs, tmp_path, source)) is fails
    assert bool(findings_of(source, "GF010", hints=False)) is fails


DOUBLED = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step(loss):
    loss = loss * 2
    loss.backward()


for i in range(3):
    loss = model(torch.randn(4, 3)).exp().sum()
    opt.zero_grad()
    loss.backward()
    step(loss)
    opt.step()
"""


def test_a_parameter_bound_again_from_itself_is_still_the_caller_s_backwarded(runs, tmp_path):
    # The call backwards the loss the line before already backwarded: GF001's, at the call.
    assert "backward through the graph a second time" in run_error(runs, tmp_path, DOUBLED)
    assert [(f.code, f.line) for f in findings_of(DOUBLED, "GF001", "GF010", hints=False)] == [("GF001", 18)]
