"""A forward through a module the object keeps (``values = self.v(states)`` in a method) built
before a loop that backwards one loss per time step fails as the same forward through a module of
the module's scope does (h110's fresh TD(0) critic): the saving of ``self.v``'s layers is read with
the method's class, which names the module. GF003 moves the forward into the loop (the same values
at each step: nothing steps inside it) where it reported GF010 only. A module the class does not
name (handed to the method) saves what gradfix cannot tell: no safe move."""

from gradfix.codemods.report import FixKind

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
T = 5


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.v = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
        self.opt = torch.optim.SGD(self.parameters(), lr=0.05)

    def train_episode(self, states, rewards):
        self.opt.zero_grad()
        values = FORWARD(states).squeeze(-1)
        total = 0.0
        for t in range(T):
            target = rewards[t] + 0.9 * values[t + 1].detach()
            td_loss = (values[t] - target) ** 2
            td_loss.backward()
            total += td_loss.item()
        self.opt.step()
        return total


critic = Critic()
for i in range(3):
    print(round(critic.train_episode(torch.randn(T + 1, 3), torch.randn(T)), 5))
"""


def test_a_forward_of_a_module_the_object_keeps_is_moved_into_the_loop(runs, tmp_path):
    source = PROGRAM.replace("FORWARD", "self.v")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    (found,) = findings_of(source, "GF003")
    assert found.fix is FixKind.SAFE


def test_a_module_the_class_does_not_name_is_not_moved_safely():
    source = PROGRAM.replace("FORWARD", "self.heads[0]").replace("self.opt = ", "self.heads = [self.v]\n        self.opt = ")
    assert all(f.fix is not FixKind.SAFE for f in findings_of(source, "GF003"))
