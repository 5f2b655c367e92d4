"""Two losses that share a graph only through a call of code gradfix did not read
(``d(detached(fake))``, ``detached`` another module's) may share nothing: that code may hand back a
copy without the graph, and then both backwards run (h83's generator: its helper detached, and
GF002 reported the program as failing). The finding is a hint. Each variant shows gradfix one
fact more: the helper in the file, detaching or not, or the shared value read directly as well;
then the finding is what that fact makes it."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F
HELPER

torch.manual_seed(0)
g = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
d = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt_g = torch.optim.SGD(g.parameters(), lr=0.05)
opt_d = torch.optim.SGD(d.parameters(), lr=0.05)
real = torch.randn(4, 4)
for step in range(3):
    fake = g(torch.randn(4, 2))
    opt_d.zero_grad()
    d_loss = F.softplus(-d(real)).mean() + F.softplus(d(detached(fake))).mean()EXTRA
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = F.softplus(-d(fake)).mean()
    g_loss.backward()
    opt_g.step()
"""
IMPORTED = "from helpers import detached"
DETACHING = "\n\ndef detached(t):\n    return t.detach()\n"
PASSING_ON = "\n\ndef detached(t):\n    return t * 1\n"
SECOND_BACKWARD = "backward through the graph a second time"


@pytest.mark.parametrize(("helper", "fails"), [(DETACHING, False), (PASSING_ON, True)])
def test_the_helper_may_do_either(helper, fails, runs, tmp_path):
    """What the imported helper does decides whether the program runs: either is possible."""
    (tmp_path / "helpers.py").write_text(helper)
    assert (SECOND_BACKWARD in run_error(runs, tmp_path, PROGRAM.replace("HELPER", IMPORTED).replace("EXTRA", ""))) is fails


def test_a_graph_shared_only_through_unread_code_is_a_hint():
    found = findings_of(PROGRAM.replace("HELPER", IMPORTED).replace("EXTRA", ""), "GF002", "GF005")
    assert found and all(f.hint for f in found)
    assert any("only through code gradfix did not read" in f.message for f in found)


def test_a_helper_of_the_file_that_detaches_shares_nothing():
    assert findings_of(PROGRAM.replace("HELPER", DETACHING).replace("EXTRA", ""), "GF002", "GF005") == []


@pytest.mark.parametrize(
    ("helper", "extra"),
    [
        (PASSING_ON, ""),  # the helper read: it passes the graph on
        (IMPORTED, " + fake.pow(2).mean() * 0"),  # the shared value read directly as well
    ],
)
def test_a_graph_shared_otherwise_is_reported(helper, extra, runs, tmp_path):
    source = PROGRAM.replace("HELPER", helper).replace("EXTRA", extra)
    if helper != IMPORTED:
        assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF002", "GF005")
    assert found and not any(f.hint for f in found)
