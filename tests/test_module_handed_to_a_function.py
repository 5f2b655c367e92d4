"""A module a function is handed as a parameter is whatever its callers pass, which an optimizer may
train: dlwpt's ``training_loop(n_epochs, optimizer, model, loss_fn, ...)``, its prediction hoisted out
of the epoch loop (h96's review), was GF006's "built once by a network nothing trains", because no
optimizer trains a module *named* ``model``; its detach made the first backward fail, and naming
the caller's module ``model`` turned the same program into GF003. It is GF003 whatever the names. A
module of the file's own that no optimizer trains is still GF006's."""

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn


def training_loop(n_epochs, optimizer, model, inputs, targets):
    predictions = MODEL(inputs)
    for epoch in range(n_epochs):
        loss = ((predictions - targets) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


torch.manual_seed(0)
linear_model = nn.Linear(1, 1)
frozen = nn.Linear(1, 1)
optimizer = torch.optim.SGD(linear_model.parameters(), lr=1e-2)
training_loop(3, optimizer, linear_model, torch.randn(10, 1), torch.randn(10, 1))
"""
SECOND_BACKWARD = "backward through the graph a second time"


def test_a_module_handed_to_the_function_may_be_the_one_its_caller_trains(runs, tmp_path):
    source = PROGRAM.replace("MODEL", "model")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert [f.code for f in findings_of(source, "GF003", "GF006", hints=False)] == ["GF003"]
    fixed = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py").rewritten
    assert fixed is not None and run_error(runs, tmp_path, fixed.decode()) == ""


def test_a_module_of_the_file_no_optimizer_trains_is_a_constant_of_training(runs, tmp_path):
    source = PROGRAM.replace("MODEL", "frozen")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert [f.code for f in findings_of(source, "GF003", "GF006", hints=False)] == ["GF006"]


def test_a_module_every_caller_hands_that_no_optimizer_trains_is_a_constant_of_training(runs, tmp_path):
    source = PROGRAM.replace("MODEL", "model").replace("training_loop(3, optimizer, linear_model,", "training_loop(3, optimizer, frozen,")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert [f.code for f in findings_of(source, "GF003", "GF006", hints=False)] == ["GF006"]
    # (called through another name, the function may be handed any module: nothing says none trains it)
    handed_on = source.replace("training_loop(3, optimizer, frozen,", "run = training_loop\nrun(3, optimizer, frozen,")
    assert "GF006" not in [f.code for f in findings_of(handed_on, "GF006")]
