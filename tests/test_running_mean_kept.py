"""A running mean of the loss kept as a tensor (``loss_ema = 0.95 * loss_ema + 0.05 * loss``) chains
every step's graph into the next, as ``total += loss`` does: GF007 read only ``store = store +
value``, and the mean, read as state the loop carries on, also hid ``total += loss`` of the same
loop (h93's review, a mutation of a VQ-VAE trainer). Any sum of products and quotients that reads
the store once is a store; its fix detaches the whole right-hand side, which keeps the logged
numbers. A mean computed by a call (``smooth(loss_ema, loss)``) is not read as one, and a mean the
loss itself reads is training state, not a log."""

from gradfix.codemods.check import check_source
from gradfix.codemods.execution.runner import RunOptions
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(4, 1)
optim = torch.optim.Adam(net.parameters(), lr=1e-3)
for epoch in range(2):
    loss_ema = 0.0
    total = 0.0
    for step in range(5):
        optim.zero_grad()
        loss = net(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        MEAN
        total += loss
        optim.step()
    print(float(loss_ema), float(total))
"""


def _graph_growth(runs, tmp_path, source: str) -> set[int]:
    """How much the graph nodes alive grow from one optimizer step to the next, in a run of ``source``."""
    script = tmp_path / "train.py"
    script.write_text(source)
    counts = runs.runner.run(script, RunOptions(measure_graphs=True)).live_graph_nodes
    return {later - earlier for earlier, later in zip(counts, counts[1:5])}


def test_a_running_mean_keeps_every_steps_graph_and_is_fixed(runs, tmp_path):
    source = PROGRAM.replace("MEAN", "loss_ema = 0.95 * loss_ema + 0.05 * loss")
    assert 0 not in _graph_growth(runs, tmp_path, source)
    found = findings_of(source, "GF007", mode=FixMode.SAFE, hints=False)
    assert sorted(f.line for f in found) == [14, 15]
    fixed = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py").rewritten
    assert fixed is not None and b"(0.95 * loss_ema + 0.05 * loss).detach()" in fixed
    assert _graph_growth(runs, tmp_path, fixed.decode()) == {0}
    assert runs.runner.run(tmp_path / "train.py").stdout == runs.runner.run(_written(tmp_path, source)).stdout  # (the same numbers)


def _written(tmp_path, source: str):
    script = tmp_path / "before.py"
    script.write_text(source)
    return script


def test_a_mean_computed_by_a_call_is_not_read_as_a_store():
    source = PROGRAM.replace("MEAN", "loss_ema = smooth(loss_ema, loss)").replace(
        "import torch.nn as nn\n", "import torch.nn as nn\nfrom stats import smooth\n"
    )
    assert 15 not in [f.line for f in findings_of(source, "GF007")]


def test_a_mean_the_loss_reads_is_training_state():
    source = PROGRAM.replace("MEAN", "loss_ema = 0.95 * loss_ema + 0.05 * loss").replace(
        "loss = net(torch.randn(8, 4)).pow(2).mean()", "loss = net(torch.randn(8, 4)).pow(2).mean() + 0.1 * loss_ema"
    )
    assert [f.line for f in findings_of(source, "GF007", hints=False) if f.line == 14] == []
