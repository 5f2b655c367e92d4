"""A module handed to a function of the file makes the call's result depend on parameters only
where the function's walk says so: the walk reads the parameter as the module its callers pass
(``call_flow``), so calling it, or handing it to code gradfix did not read, is a graph there. The
annotated transformer's ``clones(module, N)`` returns ``nn.ModuleList([copy.deepcopy(module) ...])``,
modules and no graph; the call still took the module argument for a graph of parameters, and GF006
hinted that ``self.linears`` was a graph built once in ``__init__`` (h99's review). A ``clones`` that
hands the module to an unread helper is still a hint."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

ATTENTION = """\
import copy
import torch
import torch.nn as nn


def clones(module, N):
    return BODY


class MultiHeadedAttention(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.linears = clones(nn.Linear(d_model, d_model), 4)

    def forward(self, q, k, v):
        q, k, v = [lin(x) for lin, x in zip(self.linears, (q, k, v))]
        return self.linears[-1](q + k + v)


model = MultiHeadedAttention(8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(2, 8)
    loss = model(x, x, x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_a_function_returning_copies_of_the_module_returns_no_graph(runs, tmp_path):
    source = ATTENTION.replace("BODY", "nn.ModuleList([copy.deepcopy(module) for _ in range(N)])")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF006") == []


def test_a_function_handing_the_module_to_unread_code_is_a_hint():
    source = ATTENTION.replace("import copy", "from layers import stack").replace("BODY", "stack(module, N)")
    assert {f.hint for f in findings_of(source, "GF006")} == {True}
