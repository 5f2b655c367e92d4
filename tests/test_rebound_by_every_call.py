"""A graph the constructor built that the step method reads, then rebinds on every path to a graph of
its own (SAC's ``self.alpha = self.log_alpha.exp()`` at the end of each update, h90's review of
Lizhi-sjtu's DRL code), is read by the first call alone: each call's backward walks the graph the
last call left, once, and the program runs. GF006 reported it as built once and backwarded by every
call. Rebound on some paths only, or through a call the method hands its object to, the
constructor's graph may reach the next call: a hint. Never rebound, it does, and the program fails."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
from torch import nn
from refresher import refresh


class SAC:
    def __init__(self):
        self.actor = nn.Linear(3, 2)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha = self.log_alpha.exp()
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=1e-3)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=1e-3)

    def learn(self, s):
        log_pi = torch.log_softmax(self.actor(s), dim=1)[:, 0]
        actor_loss = (self.alpha * log_pi).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        alpha_loss = -(self.log_alpha.exp() * (log_pi - 2.0).detach()).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        REBIND


torch.manual_seed(0)
agent = SAC()
for step in range(4):
    agent.learn(torch.randn(5, 3))
"""

REFRESHER = "def refresh(agent):\n    agent.alpha = agent.log_alpha.exp()\n"


def _program(tmp_path, rebind: str) -> str:
    (tmp_path / "refresher.py").write_text(REFRESHER)
    return PROGRAM.replace("REBIND", rebind)


def test_a_graph_every_call_rebinds_is_read_by_the_first_call_alone(runs, tmp_path):
    source = _program(tmp_path, "self.alpha = self.log_alpha.exp()")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF006") == []


@pytest.mark.parametrize(
    ("rebind", "fails"),
    [
        # on some paths: this run's first batch sums below zero, and the second call walks the first graph again
        ("if s.sum() > 0:\n            self.alpha = self.log_alpha.exp()", True),
        # through calls the method hands its object to, which gradfix does not see rebind it
        ('setattr(self, "alpha", self.log_alpha.exp())', False),
        ("refresh(self)", False),
    ],
)
def test_a_graph_a_call_may_rebind_is_a_hint(rebind, fails, runs, tmp_path):
    source = _program(tmp_path, rebind)
    assert ("backward through the graph a second time" in run_error(runs, tmp_path, source)) is fails
    found = findings_of(source, "GF006")
    assert [(f.line, f.hint) for f in found] == [(10, True)]
    assert "may rebind `self.alpha`" in found[0].message


def test_a_graph_no_call_rebinds_is_backwarded_by_every_call(runs, tmp_path):
    source = _program(tmp_path, "pass")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [(f.line, f.hint) for f in findings_of(source, "GF006")] == [(10, False)]


GLOBAL_PROGRAM = """\
import torch
from torch import nn

actor = nn.Linear(3, 2)
log_alpha = torch.zeros(1, requires_grad=True)
alpha = log_alpha.exp()
actor_optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)


def learn(s):
    global alpha
    actor_loss = (alpha * torch.log_softmax(actor(s), dim=1)[:, 0]).mean()
    actor_optimizer.zero_grad()
    actor_loss.backward()
    actor_optimizer.step()
    REBIND


torch.manual_seed(0)
for step in range(4):
    learn(torch.randn(5, 3))
"""


@pytest.mark.parametrize(("rebind", "found"), [("alpha = log_alpha.exp()", []), ("pass", [(6, False)])])
def test_a_global_the_step_function_rebinds_on_every_path(rebind, found, runs, tmp_path):
    """The same of a global a module-level step function reads: rebound at the end of every call, it
    is read by the first call alone; never rebound, every call backwards into it."""
    source = GLOBAL_PROGRAM.replace("REBIND", rebind)
    assert ("backward through the graph a second time" in run_error(runs, tmp_path, source)) is bool(found)
    assert [(f.line, f.hint) for f in findings_of(source, "GF006")] == found
