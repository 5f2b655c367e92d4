"""What a loop hands from one iteration to the next, asked of the loop (``analysis.loops.Loop``):
the rules read these answers instead of deriving them from the loop's syntax each."""

import textwrap

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis, Loop, read_for_data


def loop_of(code: str) -> tuple[FileAnalysis, Loop]:
    header = "import torch\nimport torch.nn as nn\n"
    analysis = FileAnalysis(cst.parse_module(header + textwrap.dedent(code)))
    (loop,) = [loop for loop in analysis.loops if not loop.is_call]
    return analysis, loop


RNN_LOOP = """
rnn = nn.RNNCell(8, 8)
opt = torch.optim.SGD(rnn.parameters(), lr=0.1)
h = torch.zeros(1, 8)
total = 0.0
for x in batches:
    h = rnn(x, h)
    loss = h.sum()
    total = total + loss.item()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("name, carried", [("h", True), ("total", True), ("loss", False), ("x", False), ("rnn", False)])
def test_a_loop_carries_what_an_iteration_reads_before_it_assigns_it(name, carried):
    _, loop = loop_of(RNN_LOOP)
    assert loop.carries(name) is carried


def test_code_moved_to_the_end_of_a_loop_may_carry_more():
    _, loop = loop_of(RNN_LOOP)
    after = cst.parse_statement("running = 0.9 * running + loss.item()\n")
    assert loop.carried_with(()) == {"h", "total"}
    assert loop.carried_with([after]) == {"h", "total", "running"}


def test_a_loop_carries_a_graph_into_the_backward_that_reads_the_state_it_left():
    analysis, loop = loop_of(RNN_LOOP)
    (site,) = analysis.backward_sites
    assert loop.carries_graph("h", site.value)
    assert not loop.carries_graph("total", site.value)  # a number: no graph


def test_a_loop_that_detaches_its_state_somewhere_detaches_it():
    code = RNN_LOOP.replace("    h = rnn(x, h)\n", "    if step % 10 == 0:\n        h = h.detach()\n    h = rnn(x, h)\n")
    analysis, loop = loop_of(code)
    assert loop.detaches("h", analysis.tree)
    assert not loop.detaches("total", analysis.tree)


def test_a_read_of_a_tensors_shape_or_length_is_no_read_of_its_data():
    analysis = FileAnalysis(cst.parse_module("z = torch.randn(imgs.shape[0], latent) + noise\nn = len(labels) * scale\n"))
    sampled, counted = analysis.module.body
    assert read_for_data(sampled, analysis.tree) == {"torch", "latent", "noise"}
    assert read_for_data(counted, analysis.tree) == {"len", "scale"}
