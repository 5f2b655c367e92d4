"""A tensor read out of a dict by a constant key (``losses["loss"]``), where the dict was built with
constant keys (``{"loss": loss}``, ``dict(loss=loss)``) and nothing could have written to it since:
what was stored under that key. World Models' ``cum_loss += losses['loss']`` keeps every step's
graph (GF007). Each variant hides one fact (a key not constant, the dict handed to code gradfix does
not read, a store by a key it cannot tell, the dict under another name): only may-facts are left."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train(log, key):
    cum_loss = 0
    for i in range(5):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        BUILD
        optimizer.zero_grad()
        losses["loss"].backward()
        optimizer.step()
        VARIANT
        cum_loss += READ
    return cum_loss


def numbers(losses):
    losses.update((key, float(value)) for key, value in losses.items())


total = train(CALLED)
print(round(float(total), 4))
"""
LITERAL = 'losses = {"loss": F.mse_loss(model(x), y), "n": x.size(0)}'
CALL = "losses = dict(loss=F.mse_loss(model(x), y), n=x.size(0))"


def _program(build=CALL, variant="pass", read="losses['loss']", called='lambda value: value, "loss"') -> str:
    return PROGRAM.replace("BUILD", build).replace("VARIANT", variant).replace("READ", read).replace("CALLED", called)


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def _verdict(source: str) -> str:
    """ "fixed", "reported", "hint" or "silent", for GF007 with the safe fixes."""
    report = _report(source)
    if any(f.code == "GF007" for f in report.fixed):
        return "fixed"
    found = [f for f in report.findings if f.code == "GF007"]
    return "silent" if not found else "hint" if all(f.hint for f in found) else "reported"


def _run(runs, tmp_path, source: str, name: str) -> list[str]:
    script = tmp_path / name
    # (what the sum keeps, read after the analysis: a read of it would stop the safe rewrite)
    script.write_text(source + 'print(getattr(total, "requires_grad", False))\n')
    result = runs.run(script)
    assert result.status == "ok", result.error_message
    return result.stdout.split()


@pytest.mark.parametrize("build", [LITERAL, CALL])
def test_gf007_a_loss_read_out_of_a_dict_by_its_constant_key(build, runs, tmp_path):
    source = _program(build)
    assert _verdict(source) == "fixed"
    rewritten = (_report(source).rewritten or b"").decode()
    assert "cum_loss += losses['loss'].detach()\n" in rewritten
    value, kept = _run(runs, tmp_path, source, "before.py")
    assert kept == "True"  # every step's graph, kept in the sum
    assert _run(runs, tmp_path, rewritten, "after.py") == [value, "False"]


def test_gf007_the_key_read_may_be_spelled_with_other_quotes():
    assert _verdict(_program(LITERAL.replace('"loss"', "'loss'"), read='losses["loss"]')) == "fixed"


# Each variant makes the item read a number where the dict was built with a tensor: the program is
# right (it sums numbers), and ``.detach()`` of a number would fail.
@pytest.mark.parametrize(
    ("variant", "read", "called"),
    [
        ("pass", "losses[key]", 'lambda value: value, "n"'),  # a key not constant (the count's)
        ("log(losses)", "losses['loss']", 'numbers, "loss"'),  # handed to a callable gradfix does not read, which writes to it
        ("losses[key] = losses[key].item()", "losses['loss']", 'lambda value: value, "loss"'),  # a store by a key it cannot tell
        ('kept = losses; kept["loss"] = kept["loss"].item()', "losses['loss']", 'lambda value: value, "loss"'),  # under another name
        ("losses.update(loss=losses['loss'].item())", "losses['loss']", 'lambda value: value, "loss"'),  # a method of the dict
    ],
)
def test_gf007_a_dict_whose_item_is_not_proved_what_was_stored_is_not_rewritten(variant, read, called, runs, tmp_path):
    assert _verdict(_program()) == "fixed"  # (the same program without the variant)
    source = _program(variant=variant, read=read, called=called)
    assert _verdict(source) in ("silent", "hint")
    assert _report(source).rewritten is None
    assert _run(runs, tmp_path, source, "variant.py")[1] == "False"  # (a sum of numbers)


def test_gf007_an_item_stored_again_by_its_constant_key_is_what_was_stored_last():
    assert _verdict(_program(variant="losses['loss'] = losses['loss'].item()")) == "silent"
    assert _verdict(_program(variant="losses['loss'] = losses['loss'] * 2")) == "fixed"


@pytest.mark.parametrize(
    "build",
    [
        'losses = dict(**{"loss": F.mse_loss(model(x), y)}, n=x.size(0))',  # unpacked: its keys are not written out
        'losses = {**{"loss": F.mse_loss(model(x), y)}, "n": x.size(0)}',
        'losses = {key: F.mse_loss(model(x), y), "n": x.size(0)}',  # a key not constant
    ],
)
def test_gf007_a_dict_built_with_keys_not_written_out_is_not_rewritten(build, runs, tmp_path):
    assert _verdict(_program()) == "fixed"  # (the same program, its keys written out)
    source = _program(build)
    assert _verdict(source) in ("silent", "hint")
    assert _run(runs, tmp_path, source, "variant.py")[1] == "True"


def test_a_loss_read_out_of_a_dict_by_its_key_is_the_tensor_a_backward_freed():
    # (GF001: the second backward of the very tensor, through the item)
    source = _program(variant="pass").replace(
        '        losses["loss"].backward()\n', '        losses["loss"].backward()\n        losses["loss"].backward()\n'
    )
    report = _report(source)
    assert [f.code for f in report.fixed] == ["GF001", "GF007"]


def test_a_dict_written_under_another_name_is_not_proved_to_hold_what_was_stored():
    # (the second backward is of a new loss, stored through the alias: it runs, and removing it would be wrong)
    source = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(4, 1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
losses = dict(loss=F.mse_loss(model(x), y))
losses["loss"].backward()
kept = losses
kept["loss"] = F.mse_loss(model(x), y)
losses["loss"].backward()
"""
    assert _report(source).rewritten is None
    assert _report(source.replace("kept = losses\nkept[", "losses[")).rewritten is None  # (stored by its key: a new loss)
    assert [f.code for f in _report(source.replace("kept = losses\nkept[", "other = {}\nother[")).fixed] == ["GF001"]


# World Models' get_loss: a function of the file that returns the dict (its last line, reduced).
RETURNED = """\
def get_losses(x, y):
    loss = F.mse_loss(model(x), y)
    RETURN


def train("""


def _returned(returns="return dict(loss=loss, n=x.size(0))") -> str:
    return _program(build="losses = get_losses(x, y)").replace("def train(", RETURNED.replace("RETURN", returns), 1)


def test_gf007_a_loss_read_out_of_the_dict_a_function_of_the_file_returns(runs, tmp_path):
    source = _returned()
    assert _verdict(source) == "fixed"
    rewritten = (_report(source).rewritten or b"").decode()
    assert "cum_loss += losses['loss'].detach()\n" in rewritten
    value, kept = _run(runs, tmp_path, source, "before.py")
    assert kept == "True"
    assert _run(runs, tmp_path, rewritten, "after.py") == [value, "False"]


@pytest.mark.parametrize(
    "returns",
    [
        # a return without the key: the key is not every return's (here it returns the loss as a number)
        'if x.sum() > 0:\n        return {"n": x.size(0), "total": loss.item()}\n    return dict(loss=loss, n=x.size(0))',
        # a return of a dict whose keys are not written out
        'if x.sum() > 0:\n        return dict({"loss": loss.item()}, n=x.size(0))\n    return dict(loss=loss, n=x.size(0))',
        # the dict handed to code gradfix does not read before it is returned
        "losses = dict(loss=loss, n=x.size(0))\n    numbers(losses)\n    return losses",
    ],
)
def test_gf007_a_function_whose_returns_do_not_all_build_the_key_is_not_rewritten(returns):
    assert _verdict(_returned()) == "fixed"  # (the same program, every return building it)
    assert _verdict(_returned(returns)) in ("silent", "hint")


def test_an_item_a_previous_iteration_wrote_is_not_the_one_stored_before_the_loop(runs, tmp_path):
    # (the dict's item holds the previous step's total from the second step on: not the 0.0 of the literal)
    source = """\
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
stats = {"loss": 0.0}
for step in range(3):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    total = stats["loss"] + loss
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    stats["loss"] = total
"""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [(f.code, f.line) for f in report.findings] == [("GF004", 13)]  # (carried in the dict into the next step)
    script = tmp_path / "carried.py"
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "error" and "second time" in result.error_message
