"""A module frozen in one place and trained in another (WGAN-GP's critic: ``p.requires_grad_(False)``
for the generator's step, ``True`` again for its own) is not frozen for the whole file: h84's review
found GF007 silent on its critic's losses kept in a list, every one holding its graph, because a call
of the critic was read as adding no parameters to a graph. Such a module's call may add them or not
(``ModuleInfo.toggled``): a graph only possible, which a backward of the value proves. A module frozen
and never trained again still adds none."""

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

CRITIC = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
critic = nn.Linear(4, 1)
generator = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
optimizer_d = torch.optim.Adam(critic.parameters(), 1e-4)
optimizer_g = torch.optim.Adam(generator.parameters(), 1e-4)
d_costs = []
for iteration in range(5):
    for p in critic.parameters():
        p.requires_grad_(False)
    generator.zero_grad()
    gen_cost = -critic(generator(torch.randn(8, 2))).mean()
    gen_cost.backward()
    optimizer_g.step()
    for p in critic.parameters():
        p.requires_grad_(ON)
    for i in range(2):
        critic.zero_grad()
        fake = generator(torch.randn(8, 2)).detach()
        disc_cost = critic(fake).mean() - critic(torch.randn(8, 4)).mean()
        disc_cost.backward()
        optimizer_d.step()
        d_costs.append(disc_cost)
print(sum(c.grad_fn is not None for c in d_costs))
"""

FEATURES = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
features = nn.Linear(4, 4)
model = nn.Linear(4, 4)
features.requires_grad_(False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scores = []
for step in range(5):
    x = torch.randn(8, 4)
    score = features(x).mean()
    scores.append(score)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
TRAINED_AGAIN
print(sum(s.grad_fn is not None for s in scores))
"""


def _gf007(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    return [f for f in report.findings if f.code == "GF007"]


def _printed(runs, tmp_path, source: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "ok", result.error_message
    return result.stdout.strip()


def test_a_critic_trained_again_after_its_freezing_keeps_its_graphs(runs, tmp_path):
    source = CRITIC.replace("ON", "True")
    assert _printed(runs, tmp_path, source) == "10"  # every loss kept holds its graph
    (found,) = _gf007(source)
    assert found.line == 25 and not found.hint


@pytest.mark.parametrize(
    ("trained_again", "hinted"),
    [
        ("", False),  # frozen for good: its outputs hold no graph
        ("features.requires_grad_(True)", True),  # trained again after the loop: frozen where it is called
        ("for p in features.parameters():\n    p.requires_grad = True", True),
    ],
)
def test_a_module_frozen_where_it_is_called_is_not_reported(trained_again, hinted, runs, tmp_path):
    """Where the module is trained again somewhere, its outputs only may hold a graph: a hint,
    no finding (a backward of the kept value would prove it, as the critic's does)."""
    source = FEATURES.replace("TRAINED_AGAIN", trained_again)
    assert _printed(runs, tmp_path, source) == "0"
    found = _gf007(source)
    assert [f.hint and "may not require grad where it runs" in f.message for f in found] == ([True] if hinted else [])


def test_a_module_never_frozen_keeps_its_graphs(runs, tmp_path):
    source = FEATURES.replace("features.requires_grad_(False)\n", "").replace("TRAINED_AGAIN", "")
    assert _printed(runs, tmp_path, source) == "5"
    (found,) = _gf007(source)
    assert not found.hint


@pytest.mark.parametrize(
    ("freeze", "toggled"),
    [("if FLAG:\n    features.requires_grad_(False)", True), ('if __name__ == "__main__":\n    features.requires_grad_(False)', False)],
)
def test_a_module_frozen_under_a_test_may_be_trained(freeze, toggled):
    """A freeze under a test gradfix does not evaluate (a command-line flag) may not run: the module
    may be trained, as one frozen and turned on again (a script's ``__main__`` test runs whenever the
    script does)."""
    source = FEATURES.replace("features.requires_grad_(False)", "FLAG = False\n" + freeze).replace("TRAINED_AGAIN", "")
    analysis = FileAnalysis(cst.parse_module(source), {}, source.encode())
    features = analysis.names.modules["features"]
    assert (features.toggled, features.frozen) == (toggled, not toggled)
