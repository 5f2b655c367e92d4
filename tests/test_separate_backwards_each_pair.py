"""GF002 reads what each loss of a group shares with an earlier one, not only what the last one
shares: a relativistic GAN step (ESRGAN's, h93's review: D frozen for G's step, unfrozen for its own,
and its first loss backwarded through G's un-detached output) groups the G loss and D's two losses;
the second D loss shares with the first only D's graph, whose parameters the program freezes in one
place and trains in another (only possibly a graph), while the first shares G's output with the G
loss for certain. The finding was a hint that blamed code gradfix did not read (D's parameters,
frozen in one place and trained in another, made every value built from them a guess, G's output
beside them too); it is certain, at the line that builds G's output. Where G's output reaches D's
loss only through code gradfix did not read, it is a hint again."""

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
g_model = GENERATOR
d_model = nn.Sequential(nn.Conv2d(3, 1, 3, padding=1), nn.Flatten(), nn.Linear(64, 1))
g_optimizer = torch.optim.Adam(g_model.parameters())
d_optimizer = torch.optim.Adam(d_model.parameters())
criterion = nn.BCEWithLogitsLoss()
real_label, fake_label = torch.ones(2, 1), torch.zeros(2, 1)
for step in range(2):
    gt, lr = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
    for p in d_model.parameters():
        p.requires_grad = False
    g_model.zero_grad()
    sr = g_model(lr)
    gt_output = d_model(gt)
    sr_output = d_model(sr)
    g_loss = (sr - gt).abs().mean() + criterion(sr_output - torch.mean(gt_output), real_label)
    g_loss.backward()
    g_optimizer.step()
    for p in d_model.parameters():
        p.requires_grad = True
    d_model.zero_grad()
    gt_output = d_model(gt)
    sr_output = d_model(sr)
    d_loss_gt = criterion(gt_output - torch.mean(sr_output), real_label) * 0.5
    d_loss_gt.backward(retain_graph=True)
    sr_output = d_model(sr.detach())
    d_loss_sr = criterion(sr_output - torch.mean(gt_output), fake_label) * 0.5
    d_loss_sr.backward()
    d_optimizer.step()
"""


def test_the_pair_that_shares_the_generators_output_makes_the_finding_certain(runs, tmp_path):
    source = PROGRAM.replace("GENERATOR", "nn.Sequential(nn.Conv2d(3, 3, 3, padding=1))")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF002")
    assert not finding.hint
    assert "built at line 16" in finding.message  # (``sr = g_model(lr)``)


def test_a_generator_output_reaching_d_only_through_code_gradfix_did_not_read_keeps_it_a_hint():
    source = PROGRAM.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom sr_utils import augment\n")
    source = source.replace("GENERATOR", "nn.Sequential(nn.Conv2d(3, 3, 3, padding=1))")
    [finding] = findings_of(
        source.replace("    sr_output = d_model(sr)\n    d_loss_gt", "    sr_output = d_model(augment(sr))\n    d_loss_gt"), "GF002"
    )
    assert finding.hint


def test_a_first_backward_that_may_keep_its_graph_keeps_it_a_hint():
    source = PROGRAM.replace("GENERATOR", "nn.Sequential(nn.Conv2d(3, 3, 3, padding=1))").replace(
        "g_loss.backward()", "g_loss.backward(retain_graph=keep)"
    )
    [finding] = findings_of(source.replace("torch.manual_seed(0)\n", "torch.manual_seed(0)\nkeep = len(__name__) > 3\n"), "GF002")
    assert finding.hint


TOGGLED_GENERATOR = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Linear(2, 3)
D = nn.Linear(3, 1)
opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
for step in range(3):
    z, real = torch.randn(4, 2), torch.randn(4, 3)
    for p in G.parameters():
        p.requires_grad = False
    fake = G(z)
    d_loss = D(fake).mean() - D(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    for p in G.parameters():
        p.requires_grad = True
    g_loss = -D(fake).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""


def test_a_generator_toggled_around_its_output_makes_no_certain_gan_step(runs, tmp_path):
    # (made while G is frozen, `fake` holds no graph of G: both backwards run; that its graph is only
    # possible, not a guess, must not make it G's output for GF005)
    assert run_error(runs, tmp_path, TOGGLED_GENERATOR) == ""
    assert [(f.code, f.hint) for f in findings_of(TOGGLED_GENERATOR, "GF002", "GF005")] == [("GF002", True)]
