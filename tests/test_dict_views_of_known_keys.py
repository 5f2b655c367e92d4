"""The values a dict built with constant keys hands out (``losses.items()``, ``losses.values()``,
``losses[name]``) hold its values' graphs as a list's items do, and its keys hold none: logging a
dict of losses term by term (``running[name] += value``, ``history.append(value)``) keeps every
step's graph, which GF007 reports, and stores detached (h102's fresh scripts found it only as a
hint, "an item of a tuple gradfix cannot tell apart"). Each variant hides one fact the proof needs
(the dict under another name, written by a helper, updated with what code gradfix does not read
gives, written at a key it cannot tell, built by such code, holding a number, handed to a call):
only a hint, or a finding without a safe fix, is left."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixKind, FixMode

from .one_program import findings_of

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
running = {"mse": 0.0, "l1": 0.0}
history = []
HELPER
for step in range(3):
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    out = model(x)
    losses = BUILD
    EXTRA
    total = sum(losses.values())
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    for name, value in losses.items():
        running[name] += value
    for value in losses.values():
        history.append(value)
print({name: round(float(kept), 5) for name, kept in running.items()}, len(history))
"""
# (read after the analysis: a read of what is kept would stop the rewrite)
KEPT_GRAPH = "print(history[0].grad_fn is not None)\n"
BUILD = '{"mse": F.mse_loss(out, y), "l1": F.l1_loss(out, y)}'


def _program(build: str = BUILD, extra: str = "pass", helper: str = "") -> str:
    return PROGRAM.replace("BUILD", build).replace("EXTRA", extra).replace("HELPER", helper)


def _fixed(source: str) -> str:
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert report.rewritten is not None
    return report.rewritten.decode()


def _lines(source: str, *statements: str) -> list[int]:
    lines = source.splitlines()
    return [next(number for number, line in enumerate(lines, 1) if line.strip() == statement) for statement in statements]


def _printed(runs, tmp_path, source: str, name: str) -> list[str]:
    script = tmp_path / name
    script.write_text(source + KEPT_GRAPH)
    result = runs.run(script)
    assert result.status == "ok", result.error_message
    return result.stdout.split()


@pytest.mark.parametrize("build", [BUILD, "dict(mse=F.mse_loss(out, y), l1=F.l1_loss(out, y))"])
def test_each_logged_value_of_a_dict_of_losses_keeps_its_graph(build, runs, tmp_path):
    source = _program(build)
    found = findings_of(source, "GF007")
    lines = _lines(source, "running[name] += value", "history.append(value)")
    assert [(f.line, f.hint, f.fix) for f in found] == [(lines[0], False, FixKind.SAFE), (lines[1], False, FixKind.SAFE)]
    fixed = _fixed(source)
    assert "running[name] += value.detach()" in fixed and "history.append(value.detach())" in fixed
    before, after = _printed(runs, tmp_path, source, "before.py"), _printed(runs, tmp_path, fixed, "after.py")
    assert before[:-1] == after[:-1]  # the same sums and count
    assert (before[-1], after[-1]) == ("True", "False")  # every step's graph kept before, none after


@pytest.mark.parametrize(
    ("build", "extra", "helper"),
    [
        (BUILD, "kept = losses", ""),  # the dict under another name
        (BUILD, "add_extra(out)", 'def add_extra(out):\n    losses["extra"] = 1.0\n'),  # a helper writes to it
        (BUILD, "losses.update(extra_terms(out))", ""),  # updated with what unread code gives
        (BUILD, "losses[name_of(out)] = out.mean()", ""),  # written at a key gradfix cannot tell
        ("compute_losses(out, y)", "pass", ""),  # built by code gradfix does not read
        (BUILD.replace("}", ', "n": 8}'), "pass", ""),  # a number among the values
        (BUILD, "record(losses)", ""),  # handed to a call that may keep or change it
        (BUILD, "clear_later = lambda: losses.clear()", ""),  # a lambda that may write to it when called
    ],
)
def test_a_dict_whose_writes_gradfix_does_not_all_see_is_not_rewritten(build, extra, helper):
    assert [f.fix for f in findings_of(_program(), "GF007")] == [FixKind.SAFE, FixKind.SAFE]  # (without the variant)
    found = findings_of(_program(build, extra, helper), "GF007")
    assert len(found) == 2 and not any(f.fix is FixKind.SAFE for f in found)


def test_a_key_of_a_known_dict_holds_no_graph():
    # ``latest[name] = value`` at a key of ``losses`` keeps ``latest`` (made empty in the step) a
    # dict of known keys whose every value holds a graph: the next loop reads them with their
    # graphs. At a key gradfix cannot tell holds none, ``latest`` is of unknown shape: a hint.
    copied = "latest = {}\n    for name, value in losses.items():\n        latest[name] = value"
    source = _program().replace("for name, value in losses.items():\n        running[name] += value", copied)
    source = source.replace("for value in losses.values():", "for value in latest.values():")
    assert [(f.hint, f.fix) for f in findings_of(source, "GF007")] == [(False, FixKind.SAFE)]
    unknown_key = source.replace("latest[name] = value", "latest[str(value)] = value")
    assert [f.hint for f in findings_of(unknown_key, "GF007")] == [True]
