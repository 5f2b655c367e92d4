"""A value an inner loop assigns on its first pass, read after it, is the previous iteration's only
if the inner loop runs no time: for a ``for`` over ``range(N_CRITIC)`` of the same bounds in every
iteration gradfix proves it runs, for a ``while`` with a counter it cannot, and GF004 reported the
generator step's ``fake`` as carried as a default finding (h92's metamorphic tester: the WGAN-GP
critic loop written as a ``while``; the program runs). It is a hint: the bug rests on the loop
running no time."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
N_CRITIC = 2
gen, critic = nn.Linear(2, 3), nn.Linear(3, 1)
opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)
for batch in range(3):
    real = torch.randn(4, 3)
LOOP
        fake = gen(torch.randn(4, 2))
        loss_c = critic(fake.detach()).mean() - critic(real).mean()
        opt_c.zero_grad()
        loss_c.backward()
        opt_c.step()
INCREMENT
    loss_g = -critic(fake).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
"""


@pytest.mark.parametrize(
    ("loop", "increment", "found"),
    [
        ("    for _ in range(N_CRITIC):", "", []),
        ("    i = 0\n    while i < N_CRITIC:", "        i += 1", [True]),
    ],
)
def test_a_value_an_inner_loop_assigns_is_carried_only_if_the_loop_runs_no_time(loop, increment, found, runs, tmp_path):
    source = PROGRAM.replace("LOOP", loop).replace("INCREMENT\n", increment + "\n" if increment else "")
    assert run_error(runs, tmp_path, source) == ""
    assert [f.hint for f in findings_of(source, "GF004")] == found
