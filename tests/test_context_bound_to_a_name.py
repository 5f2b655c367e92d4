"""A ``with`` statement whose context is a name (nanoGPT's ``ctx = nullcontext() if device_type ==
"cpu" else torch.amp.autocast(...)``, then ``with ctx:``) is read as the contexts that name is bound
to, once, in the file: ``nullcontext`` and ``torch.cuda.amp.autocast`` let the body's exceptions
through, so an assignment in the body is made on every path past it. h95's review: nanoGPT's
gradient-accumulation loop with the scaler's backward dedented after it got a default GF004 (the
previous iteration's loss carried, only if the context swallowed an exception) instead of GF008.
A context gradfix does not know may swallow one, or not: the carried loss is then a hint, not a
finding."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import contextlib

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
steps = 4
ctx = CONTEXT
for iteration in range(2):
    for micro_step in range(steps):
        with ctx:
            loss = nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)) / steps
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""


@pytest.mark.parametrize(
    "context",
    ["contextlib.nullcontext()", 'contextlib.nullcontext() if steps > 1 else torch.autocast("cpu")'],
    ids=["nullcontext", "either"],
)
def test_a_context_bound_to_a_name_that_lets_exceptions_through_assigns_on_every_path(runs, tmp_path, context):
    source = PROGRAM.replace("CONTEXT", context)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []
    assert [f.code for f in findings_of(source, "GF008", hints=False)] == ["GF008"]  # (the backward after the batch loop)


def test_a_context_gradfix_does_not_know_makes_the_carried_loss_a_guess():
    source = PROGRAM.replace("CONTEXT", "make_context()").replace("import contextlib\n", "import contextlib\nfrom amp_tools import make_context\n")
    assert [(f.code, f.hint) for f in findings_of(source, "GF004")] == [("GF004", True)]


def test_a_context_bound_twice_is_not_read():
    source = PROGRAM.replace("CONTEXT", "contextlib.nullcontext()").replace("steps = 4\n", "steps = 4\nctx = contextlib.suppress(ValueError)\n")
    assert [(f.code, f.hint) for f in findings_of(source, "GF004")] == [("GF004", True)]
