"""``analysis.guards``: an inner loop that walks as many items in every iteration of the loop
around it assigns what it assigns in each of them; a progress bar walks the items of what it is
given."""

import importlib

import pytest

from gradfix.codemods.analysis.guards import ITEMS_OF_FIRST_ARGUMENT, RANGES
from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode


def _named(qualified: str):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("bar", sorted(ITEMS_OF_FIRST_ARGUMENT))
def test_a_progress_bar_walks_the_items_of_what_it_is_given_each_time(bar):
    pytest.importorskip("tqdm")
    items = [3, 1, 2]
    for _ in range(2):
        assert list(_named(bar)(items, desc="epoch", total=7, disable=True)) == items


@pytest.mark.parametrize("bar", sorted(RANGES))
def test_a_range_bar_walks_a_range_of_its_arguments(bar):
    pytest.importorskip("tqdm")
    assert list(_named(bar)(2, 9, 3, disable=True)) == list(range(2, 9, 3))


# rosinality/igebm-pytorch (review h61): the training loss reads the energy of the last sampling
# step, whose backward freed its graph; every outer iteration runs the sampling loop's five steps.
SAMPLING = """\
import torch, torch.nn as nn
from tqdm import tqdm
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
STEPS
for i in range(3):
    neg_img = torch.rand(8, 6)
    neg_img.requires_grad = True
    for k in WALKED:
        neg_out = model(neg_img)
        neg_out.sum().backward()
        neg_img.data.add_(-10 * neg_img.grad.data)
        neg_img.grad.zero_()
    neg_img = neg_img.detach()
    model.zero_grad()
    loss = (model(torch.rand(8, 6)) - neg_out).mean()
    loss.backward()
    optimizer.step()
"""


def _codes(steps: str, walked: str) -> list[tuple[str, bool]]:
    code = SAMPLING.replace("STEPS", steps).replace("WALKED", walked)
    return [(f.code, f.hint) for f in check_source(code.encode(), all_rules(), FixMode.NONE, "train.py", {}).findings]


@pytest.mark.parametrize("walked", ["range(5)", "tqdm(range(5))", 'tqdm(range(5), desc=f"step {i}")'])
def test_the_value_read_after_a_sampling_loop_under_a_progress_bar_is_this_iteration_s(walked):
    assert _codes("", walked) == [("GF010", False)]


def test_a_bar_over_an_iterator_may_walk_nothing_in_a_later_iteration():
    """The variant that hides the fact: the iterator is used up by the first iteration, so a later
    one may read the previous iteration's energy (a carried graph, a guess)."""
    assert _codes("steps = iter(range(5))", "tqdm(steps)") == [("GF004", True)]


# yilundu/improved_contrastive_divergence (review h78): `im_neg_kl` is assigned in the `else` of a
# test the loop never changes, and read after that `if` under another test: an iteration that reads
# it assigned it (with the flag set, no iteration does, and the first read raises NameError).
FLAG_ELSE = """\
import sys
import torch, torch.nn as nn
hmc = "--hmc" in sys.argv
model = nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters(), 1e-3)
for step in range(3):
    x = torch.rand(8, 4, requires_grad=True)
    if TEST:
        im_neg = x.detach()
    else:
ASSIGNS
    loss = model(torch.randn(8, 4)).mean() - model(im_neg).mean()
    if "--kl" not in sys.argv:
        loss = loss + model(im_neg_kl).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
ASSIGNED = "        im_neg = x.detach()\n        im_neg_kl = x - 0.1 * torch.autograd.grad(model(x).sum(), [x], create_graph=True)[0]"


def _flag_else_codes(test: str, assigns: str, read_under_a_test: bool = True) -> list[tuple[str, bool]]:
    code = FLAG_ELSE.replace("TEST", test).replace("ASSIGNS", assigns)
    if not read_under_a_test:
        code = code.replace('    if "--kl" not in sys.argv:\n        loss = loss', "    loss = loss")
    return [(f.code, f.hint) for f in check_source(code.encode(), all_rules(), FixMode.NONE, "train.py", {}).findings]


@pytest.mark.parametrize("read_under_a_test", [True, False])
def test_a_value_assigned_in_the_else_of_a_test_the_loop_never_changes_is_this_iterations(read_under_a_test):
    assert _flag_else_codes("hmc", ASSIGNED, read_under_a_test) == []
    # Hidden facts: the test answers anew each iteration (an earlier iteration may have taken the
    # `else`), or the `else` assigns on some paths only: what is read may be an earlier iteration's.
    # Read under the `--kl` test, which may skip it whenever the earlier value is there, only maybe:
    # a hint; read on every path, a finding.
    found = ("GF004", read_under_a_test)
    assert found in _flag_else_codes("step % 2", ASSIGNED, read_under_a_test)
    sometimes = "        im_neg = x.detach()\n        if step < 2:\n" + ASSIGNED.split("\n")[1].replace("        ", "            ", 1)
    assert found in _flag_else_codes("hmc", sometimes, read_under_a_test)
