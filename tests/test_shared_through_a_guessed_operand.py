"""What a loss holds only through an operand whose graph is only guessed is a may-fact of it: the
origins such an operand alone brings are uncertain in the sum (``Value.uncertain_origins``), as
those out of code gradfix did not read are. Pix2PixHD's feature-matching loss reads the
discriminator's real features only as ``real_feature.detach()``, inside loops over its list
arguments; where the walk of such a helper could not tell the items it iterates apart, its result
was guessed to hold the real features' graph, and added to the adversarial loss the guess became
certain: GF002 reported the generator and discriminator losses as sharing it, by default (h97's
review of the GANs-Public notebooks, and a variant of it). A hint now; the same helper without
the ``.detach()`` still gets it, and one that plainly reads the real features gets the default
finding."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

PIX2PIXHD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def fm_loss(real_preds, fake_preds):
    fm = 0.0
    for real_features, fake_features in [(real_preds[0], fake_preds[0])]:
        for real_feature, fake_feature in zip(real_features, fake_features):
            fm += F.l1_loss(REAL, fake_feature)
    return fm


class Disc(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        h = self.a(x)
        return [[h, self.b(h)]]


gen, dis = nn.Linear(4, 4), Disc()
g_opt = torch.optim.Adam(gen.parameters())
d_opt = torch.optim.Adam(dis.parameters())
for step in range(3):
    x_real = torch.randn(8, 4)
    x_fake = gen(x_real)
    fake_g = dis(x_fake)
    fake_d = dis(x_fake.detach())
    real_d = dis(x_real)
    g_loss = -fake_g[-1][-1].mean() + fm_loss(real_d, fake_g)
    d_loss = fake_d[-1][-1].mean() - real_d[-1][-1].mean()
    g_opt.zero_grad()
    g_loss.backward()
    g_opt.step()
    d_opt.zero_grad()
    d_loss.backward()
    d_opt.step()
"""


def test_a_graph_shared_only_through_a_guessed_operand_is_a_hint(runs, tmp_path):
    source = PIX2PIXHD.replace("REAL", "real_feature.detach()")
    assert run_error(runs, tmp_path, source) == ""
    assert [f.hint for f in findings_of(source, "GF002")] == [True]


def test_without_the_detach_it_is_still_reported(runs, tmp_path):
    source = PIX2PIXHD.replace("REAL", "real_feature")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [f.line for f in findings_of(source, "GF002")] == [36]


def test_a_helper_that_plainly_reads_the_real_features_is_a_finding(runs, tmp_path):
    start, end = PIX2PIXHD.index("def fm_loss"), PIX2PIXHD.index("class Disc")
    helper = "def fm_loss(real_preds, fake_preds):\n    return F.l1_loss(real_preds[0][0], fake_preds[0][0])\n\n\n"
    source = PIX2PIXHD[:start] + helper + PIX2PIXHD[end:]
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [(f.line, f.hint) for f in findings_of(source, "GF002")] == [(32, False)]
