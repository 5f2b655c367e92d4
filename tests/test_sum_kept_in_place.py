"""``total.add_(loss)`` keeps every step's graph in ``total``, as ``total += loss`` does
(``ACCUMULATING_METHODS``): NVIDIA's BERT example summed its step losses into a tensor with
``add_`` and memory grew with every step (https://github.com/NVIDIA/DeepLearningExamples/issues/1102,
h102's review; gradfix saw the graph in ``total`` but GF007 read only ``+=``, appends and
assignments). The fix, ``total.add_(loss.detach())``, is safe where ``+=``'s is: the same sum, and
no backward reads ``total``. A total made anew in each step keeps nothing; one a backward reads
after the loop is a gradient accumulation, left alone; the ``add_`` of an object of code gradfix did
not read is no tensor's sum."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

STATS = """\
import torch

model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = torch.zeros(())
for step in range(4):
    FRESH
    loss = model(torch.randn(4, 3)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    total.add_(loss)
READ
print("SUM %.6f" % total.item())
"""


def safely_fixed(source: str) -> tuple[list[int], str | None]:
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    return [f.line for f in report.fixed if f.code == "GF007"], report.rewritten and report.rewritten.decode()


def test_a_sum_kept_in_place_is_fixed_like_a_sum_kept_with_plus_equals(runs, tmp_path):
    source = STATS.replace("    FRESH\n", "").replace("READ\n", "")
    lines, rewritten = safely_fixed(source)
    assert lines == [11] and rewritten == source.replace("total.add_(loss)", "total.add_(loss.detach())")
    assert run_error(runs, tmp_path, source) == "" and run_error(runs, tmp_path, rewritten) == ""


def test_a_total_made_in_each_step_keeps_nothing():
    source = STATS.replace("FRESH", "total = torch.zeros(())").replace("READ\n", "")
    assert findings_of(source, "GF007") == []


def test_a_total_a_backward_reads_is_left_alone(runs, tmp_path):
    accumulated = STATS.replace("    FRESH\n", "").replace("    loss.backward()\n", "").replace("READ", "total.backward()")
    assert run_error(runs, tmp_path, accumulated) == ""
    assert safely_fixed(accumulated) == ([], None)


def test_an_objects_add_method_of_code_gradfix_did_not_read_is_no_tensors_sum():
    source = STATS.replace("total = torch.zeros(())", "from meters import Meter\ntotal = Meter()").replace("    FRESH\n", "").replace("READ\n", "")
    source = source.replace('print("SUM %.6f" % total.item())\n', "")
    assert findings_of(source, "GF007") == []
