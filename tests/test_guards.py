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
