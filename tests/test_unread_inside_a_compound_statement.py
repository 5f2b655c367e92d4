"""A statement that builds a graph through the statements it holds (``for key, value in
features.items(): grams[key] = gram(value)``) rests on code gradfix did not read where what it
assigns does: fast-neural-style's style grams, built once before the loop from a VGG of the project
whose forward walks ``self.features._modules`` (unread) and whose constructor freezes every
parameter, hold no graph, and the program runs (h93's review); GF006 reported the ``for`` statement
as certain while it gave the assignment inside it a hint. The variant whose VGG forward gradfix
reads, and which trains nothing that freezes it, keeps its graph, fails, and is reported for
certain."""

from gradfix.codemods.check import check_file
from gradfix.codemods.registry import all_rules

from .one_program import run_error

UNREAD_FORWARD = """\
        features = {}
        for name, layer in self.features._modules.items():
            x = layer(x)
            features["relu" + name] = x
        return features
"""
READ_FORWARD = """\
        return self.features(x)
"""
VGG = """\
import torch.nn as nn


class VGG16(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        FREEZE

    def forward(self, x):
FORWARD"""
TRAIN = """\
import torch
import torch.nn as nn

import vgg


def gram(tensor):
    b, c, h, w = tensor.shape
    x = tensor.view(b, c, h * w)
    return torch.bmm(x, x.transpose(1, 2)) / (c * h * w)


torch.manual_seed(0)
net = nn.Conv2d(3, 3, 3, padding=1)
extractor = vgg.VGG16()
style_features = STYLE_FEATURES
style_gram = {}
for key, value in style_features.items():
    style_gram[key] = gram(value)
optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(3):
    optimizer.zero_grad()
    style_loss = 0
    for key, value in GENERATED_FEATURES.items():
        style_loss = style_loss + (gram(value) - style_gram[key]).pow(2).mean()
    style_loss.backward()
    optimizer.step()
"""
FROZEN = "for param in self.features.parameters():\n            param.requires_grad = False"


def _gf006(tmp_path, freeze: str, forward: str, features: str, runs) -> tuple[list[bool], str]:
    """GF006's findings (whether each is a hint) on the program whose VGG freezes its parameters
    with ``freeze`` and runs ``forward``, reading an image's features as ``features`` (``%s``: the
    image), and how its run ends."""
    (tmp_path / "vgg.py").write_text(VGG.replace("FREEZE", freeze).replace("FORWARD", forward))
    train = TRAIN.replace("STYLE_FEATURES", features % "torch.rand(2, 3, 8, 8)").replace(
        "GENERATED_FEATURES", features % "net(torch.rand(2, 3, 8, 8))"
    )
    error = run_error(runs, tmp_path, train)
    findings = check_file(tmp_path / "train.py", all_rules()).findings
    return [finding.hint for finding in findings if finding.code == "GF006"], error


def test_a_for_statement_that_assigns_from_unread_code_is_a_guess(runs, tmp_path):
    hints, error = _gf006(tmp_path, FROZEN, UNREAD_FORWARD, "extractor(%s)", runs)
    assert error == ""
    assert hints and all(hints)


def test_a_for_statement_that_assigns_a_graph_gradfix_read_is_certain(runs, tmp_path):
    hints, error = _gf006(tmp_path, "pass", READ_FORWARD, "dict(relu=extractor(%s))", runs)
    assert "backward through the graph a second time" in error
    assert False in hints
