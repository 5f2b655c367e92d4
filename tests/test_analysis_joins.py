"""A name bound to one of torch's functions on each of two paths (``cost = F.mse_loss`` on one,
``F.binary_cross_entropy_with_logits`` on the other, as SEGAN binds its criterion): a call of it has
the facts both functions have, and only may have those one of them has. Each program runs with
torch: the bug fails, the safe rewrite runs; each variant hides one fact, and loses the proof."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# A GAN whose discriminator step backwards through the generator's output, not detached (SEGAN's
# train loop with ``Genh.detach()`` removed): the generator step then backwards a freed graph.
GAN = (
    HEADER
    + """\
G = nn.Linear(4, 4)
D = nn.Linear(4, 1)
g_opt = torch.optim.SGD(G.parameters(), lr=0.1)
d_opt = torch.optim.SGD(D.parameters(), lr=0.1)


def train(vanilla, criterion=None):
    for step in range(3):
        clean, noisy = torch.randn(8, 4), torch.randn(8, 4)
BIND
        d_opt.zero_grad()
        fake = G(noisy)
        d_loss = cost(D(clean), torch.ones(8, 1)) + cost(D(fake), torch.zeros(8, 1))
        d_loss.backward()
        d_opt.step()
        g_opt.zero_grad()
        g_loss = cost(D(fake), torch.ones(8, 1))
        g_loss.backward()
        g_opt.step()


train(False)
"""
)
IF_ELSE = "        if vanilla:\n            cost = F.binary_cross_entropy_with_logits\n        else:\n            cost = F.mse_loss\n"
IF_EXP = "        cost = F.binary_cross_entropy_with_logits if vanilla else F.mse_loss\n"

# A duplicate backward, whose second call fails only where the loss's function saved a tensor for
# its backward (``w + 1.0`` saves none): removing it is right only then.
DUPLICATE = (
    HEADER
    + """\
w = torch.randn(5, requires_grad=True)
target = torch.ones(5)


def step(exact, criterion=None):
BIND
    loss = cost(w + 1.0, target).sum()
    loss.backward()
    loss.backward()


step(True, torch.mul)
"""
)


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def _verdicts(source: str, code: str) -> list[str]:
    """Each finding of ``code`` with the hints: "fixed" (a safe fix), "reported" or "hint"."""
    report = _report(source)
    fixed = [f for f in report.fixed if f.code == code]
    return ["fixed"] * len(fixed) + ["hint" if f.hint else "reported" for f in report.findings if f.code == code and f not in fixed]


def _runs(runs, tmp_path, source: str, name: str):
    script = tmp_path / name
    script.write_text(source)
    return runs.run(script)


@pytest.mark.parametrize("bind", [IF_ELSE, IF_EXP])
def test_a_criterion_bound_on_two_branches_is_read_as_both_functions(bind, runs, tmp_path):
    source = GAN.replace("BIND\n", bind)
    assert _verdicts(source, "GF005") == ["fixed"]
    before = _runs(runs, tmp_path, source, "before.py")
    assert before.status == "error" and "backward through the graph a second time" in before.error_message
    rewritten = (_report(source).rewritten or b"").decode()
    assert "cost(D(fake.detach()), torch.zeros(8, 1))" in rewritten
    after = _runs(runs, tmp_path, rewritten, "after.py")
    assert after.status == "ok", after.error_message


@pytest.mark.parametrize(
    "bind",
    [
        # one branch a callable the code was handed (an ``nn.MSELoss()``, or a module of another package)
        "        cost = F.mse_loss if vanilla else criterion\n",
        "        if vanilla:\n            cost = F.mse_loss\n        else:\n            cost = criterion\n",
        "        cost = F.mse_loss if vanilla else criterion or F.mse_loss\n",
        "        try:\n            from losses import lsgan_loss\n        except ImportError:\n            lsgan_loss = F.mse_loss\n"
        "        cost = F.binary_cross_entropy_with_logits if vanilla else lsgan_loss\n",
        # bound on two tests taken for exhaustive, not proved so: the parameter's value is left otherwise
        "        if vanilla == 1:\n            criterion = F.mse_loss\n        elif vanilla == 0:\n"
        "            criterion = F.binary_cross_entropy_with_logits\n        cost = criterion\n",
    ],
)
def test_a_branch_that_binds_a_callable_gradfix_did_not_read_leaves_a_hint(bind, runs, tmp_path):
    source = GAN.replace("BIND\n", bind)
    assert _verdicts(GAN.replace("BIND\n", IF_EXP), "GF005") == ["fixed"]  # (the same program, with both functions torch's)
    assert _verdicts(source, "GF005") == ["hint"]
    assert _report(source).rewritten is None
    # (run with a criterion handed in, for the branches that call it)
    before = _runs(runs, tmp_path, source.replace("train(False)", "train(False, nn.MSELoss())"), "before.py")
    assert before.status == "error" and "backward through the graph a second time" in before.error_message


def test_a_duplicate_backward_of_a_function_each_branch_proves_saving_is_removed(runs, tmp_path):
    source = DUPLICATE.replace("BIND\n", "    cost = F.mse_loss if exact else F.l1_loss\n")
    assert _verdicts(source, "GF001") == ["fixed"]
    assert _runs(runs, tmp_path, source, "before.py").status == "error"
    rewritten = (_report(source).rewritten or b"").decode()
    assert rewritten.count("loss.backward()") == 1
    assert _runs(runs, tmp_path, rewritten, "after.py").status == "ok"


@pytest.mark.parametrize(
    ("bind", "flag"),
    [
        # torch.sub saves nothing for its backward: on that branch the second backward runs, and adds
        # the gradient again (removing it changes ``w.grad``)
        ("    cost = torch.mul if exact else torch.sub\n", "False"),
        ("    if exact:\n        cost = torch.mul\n    else:\n        cost = torch.sub\n", "False"),
        # a callable handed in: whatever it saves is not read
        ("    cost = torch.mul if exact else criterion\n", "False"),
    ],
)
def test_a_duplicate_backward_through_a_function_one_branch_does_not_prove_saving_is_not_removed(bind, flag, runs, tmp_path):
    source = DUPLICATE.replace("BIND\n", bind)
    assert _verdicts(DUPLICATE.replace("BIND\n", bind.replace("torch.sub", "torch.div").replace("criterion", "torch.div")), "GF001") == ["fixed"]
    assert _verdicts(source, "GF001") != ["fixed"]
    assert _report(source).rewritten is None
    # (the branch that saves nothing: both backwards run, and the gradient is added twice)
    other = source.replace("step(True, torch.mul)", f"step({flag}, torch.sub)\nprint(w.grad.tolist())")
    result = _runs(runs, tmp_path, other, "other.py")
    assert result.status == "ok" and result.stdout.strip() == "[2.0, 2.0, 2.0, 2.0, 2.0]"
