"""GF010 where the freed graph is reached only through a guessed value: an item of a dict whose
items gradfix no longer knows (written under another name, handed to code that may write to it, put
in another container, stored at a key it cannot read). The item may hold what was stored since, not
the graph the first backward freed: the finding is a hint. Each test pairs such a program with the
variant that keeps the fact (the item is what was stored: a dict nothing else could write, a list, a
plain name), which raises when run and stays a finding of the default output."""

import pytest

import gradfix

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
BUILD
READ.backward()
BETWEEN
READ.backward()
print(model.weight.grad.sum().item())
"""
LITERAL = 'losses = {"loss": F.mse_loss(model(x), y)}'
CALL = "losses = dict(loss=F.mse_loss(model(x), y))"
ITEM = 'losses["loss"]'
SECOND_LINE = 11  # (the second backward, with one line between)


def _program(build: str, between: str, read: str = ITEM) -> str:
    return PROGRAM.replace("BUILD", build).replace("BETWEEN", between).replace("READ", read)


def _found(source: str) -> list[tuple[str, int, bool]]:
    return [(f.code, f.line, f.hint) for f in gradfix.check(source, hints=True).findings]


def _ran(runs, tmp_path, source: str, name: str):
    script = tmp_path / name
    script.write_text(source)
    return runs.run(script)


def _raises_freed(result) -> bool:
    return result.status == "error" and "backward through the graph a second time" in result.error_message


# What stores a fresh loss where the dict's item is read, unseen by what gradfix knows of `losses`.
WRITES_UNSEEN = {
    "through another name": 'kept = losses\nkept["loss"] = F.mse_loss(model(x), y)',
    "by a key not written out": 'key = "loss"\nlosses[key] = F.mse_loss(model(x), y)',
    "by a function handed the dict": 'def store(d):\n    d["loss"] = F.mse_loss(model(x), y)\nstore(losses)',
    "through another container": 'both = [losses]\nboth[0]["loss"] = F.mse_loss(model(x), y)',
}


@pytest.mark.parametrize("build", [LITERAL, CALL], ids=["literal", "dict-call"])
@pytest.mark.parametrize("write", list(WRITES_UNSEEN), ids=list(WRITES_UNSEEN))
def test_a_dict_item_stored_again_unseen_is_no_default_freed_graph(build, write, runs, tmp_path):
    guessed = _program(build, WRITES_UNSEEN[write])
    assert _ran(runs, tmp_path, guessed, "guessed.py").status == "ok"  # (the item holds the fresh loss)
    assert _found(guessed) == [("GF010", SECOND_LINE + WRITES_UNSEEN[write].count("\n"), True)]
    # The same program without the store: the item is what was stored, and the finding stays.
    known = _program(build, "pass")
    assert _raises_freed(_ran(runs, tmp_path, known, "known.py"))
    assert [(code, line, hint) for code, line, hint in _found(known) if not hint] == [("GF001", SECOND_LINE, False)]


def test_the_hint_says_why_the_item_may_not_hold_the_freed_graph():
    (finding,) = gradfix.check(_program(LITERAL, WRITES_UNSEEN["through another name"]), hints=True).findings
    assert finding.code == "GF010" and finding.hint and finding.fix is None
    assert 'gradfix cannot tell what `losses["loss"]` holds' in finding.message


@pytest.mark.parametrize(
    ("build", "read"),
    [
        (LITERAL, ITEM),  # a dict nothing else writes
        ("losses = [F.mse_loss(model(x), y)]", "losses[0]"),  # a list's item: what the list holds
        ("loss = F.mse_loss(model(x), y)", "loss"),  # a plain name
    ],
    ids=["dict", "list", "name"],
)
def test_a_graph_known_to_be_freed_stays_a_default_finding(build, read, runs, tmp_path):
    # A second loss built on the freed graph (not the very tensor backwarded again: GF001's).
    known = _program(build, "pass", read).replace(f"pass\n{read}.backward()", f"pass\n{read}.exp().backward()")
    assert _raises_freed(_ran(runs, tmp_path, known, "known.py"))
    # (GF002's: the two backwards share the graph; it explains the second one, which GF010 leaves to it)
    assert _found(known) == [("GF002", SECOND_LINE - 2, False)]
    # beside it, the dict's item once a store under another name may have replaced it: a hint
    guessed = _program(LITERAL, WRITES_UNSEEN["through another name"])
    assert [hint for code, line, hint in _found(guessed)] == [True]


def test_a_dict_handed_to_another_name_before_the_first_backward_is_no_default_freed_graph(runs, tmp_path):
    # Both backwards read the item through the whole: what the first backward freed is the dict's
    # graph, and the item read again may be what the other name stored since.
    source = _program(LITERAL, 'kept["loss"] = F.mse_loss(model(2 * x), y)').replace(f"{LITERAL}\n", f"{LITERAL}\nkept = losses\n")
    assert _ran(runs, tmp_path, source, "guessed.py").status == "ok"
    assert _found(source) == [("GF010", SECOND_LINE + 1, True)]


# GF002 reads the same fact: a later loss that reaches the graph the first backward freed only through
# the dict's item shares it only as a guess, and merging the two backwards is no safe rewrite (here it
# would backward the loss stored under the other name twice and the first loss not at all).
MIXED = "(F.mse_loss(model(x), y) + losses['loss']).backward()"


def test_gf002_a_loss_sharing_the_freed_graph_only_through_an_unknown_item_is_a_hint(runs, tmp_path):
    write = 'kept = losses\nkept["loss"] = F.mse_loss(model(2 * x), y)'
    guessed = _program(LITERAL, write).replace(f"{write}\n{ITEM}.backward()", f"{write}\n{MIXED}")
    assert _ran(runs, tmp_path, guessed, "guessed.py").status == "ok"
    (finding,) = gradfix.check(guessed, hints=True).findings
    assert (finding.code, finding.hint, finding.fix) == ("GF002", True, None)
    known = _program(LITERAL, "pass").replace(f"pass\n{ITEM}.backward()", f"pass\n{MIXED}")
    assert _raises_freed(_ran(runs, tmp_path, known, "known.py"))
    assert [(f.code, f.hint, f.fix and f.fix.value) for f in gradfix.check(known, hints=True).findings] == [("GF002", False, "safe")]
