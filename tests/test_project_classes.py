"""A project's own nn.Module classes, read across files (``analysis.class_exports``): a file that
builds ``Discriminator()`` from ``nets`` knows what the analysis of ``nets`` proved of calling it,
as it knows its own classes; each fact hidden from that analysis leaves the call unread."""

import subprocess
import sys
import textwrap

import pytest

from gradfix.codemods.check import check_file, module_exports
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixKind, FixMode

NETS = textwrap.dedent(
    """\
    import torch.nn as nn


    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))

        def forward(self, z):
            return self.net(z)


    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1), nn.Sigmoid())

        def forward(self, x):
            return self.net(x)
    """
)
# SRGAN's layout: the G step backwards through netD(fake_img), then the D step reads fake_img
# without .detach(), and its backward walks G's freed graph.
TRAIN = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn
    from nets import Generator, Discriminator

    netG = Generator()
    netD = Discriminator()
    optimizerG = torch.optim.Adam(netG.parameters())
    optimizerD = torch.optim.Adam(netD.parameters())
    mse = nn.MSELoss()
    for step in range(3):
        z, real_img = torch.randn(16, 4), torch.randn(16, 8)
        fake_img = netG(z)
        fake_out = netD(fake_img).mean()
        optimizerG.zero_grad()
        g_loss = mse(fake_img, real_img) + 0.001 * (1 - fake_out)
        g_loss.backward()
        optimizerG.step()
        real_out = netD(real_img).mean()
        fake_out = netD(fake_img).mean()
        d_loss = 1 - real_out + fake_out
        optimizerD.zero_grad()
        d_loss.backward()
        optimizerD.step()
    print("ran")
    """
)


def _project(tmp_path, nets=NETS, train=TRAIN):
    (tmp_path / ".git").mkdir()
    (tmp_path / "nets.py").write_text(nets)
    (tmp_path / "train.py").write_text(train)
    return tmp_path / "train.py"


def _run(path):
    return subprocess.run([sys.executable, path.name], cwd=path.parent, capture_output=True, text=True, timeout=120)


def test_a_module_exports_what_calling_its_module_class_does():
    exported = module_exports(NETS.encode())["Discriminator"].module_class
    assert exported is not None
    assert (exported.returns_parameters, exported.returns_inputs, exported.returns_saved) == (True, True, True)
    assert exported.reads_modelled_code and not exported.returns_unread


def test_the_gan_step_of_a_class_of_another_module_is_a_finding_with_a_safe_fix_that_runs(tmp_path):
    train = _project(tmp_path)
    assert "backward through the graph a second time" in _run(train).stderr  # the bug is real
    findings = check_file(train, all_rules()).findings
    assert [(f.code, f.line, f.fix, f.hint) for f in findings] == [("GF005", 22, FixKind.SAFE, False)]
    fixed = check_file(train, all_rules(), FixMode.SAFE)
    train.write_bytes(fixed.rewritten)
    assert "netD(fake_img.detach())" in train.read_text()
    assert _run(train).stdout.strip() == "ran"


# Each hides one fact from the analysis of ``nets``; the call of ``netD`` is then code gradfix did not
# read (a hint at most), and nothing is rewritten as safe.
HIDDEN = {
    "a base of a package outside the project": ("import torch.nn as nn\nfrom extlib import Base\n", "class Discriminator(Base):"),
    "a mixin of a package outside the project": ("import torch.nn as nn\nfrom extlib import Mixin\n", "class Discriminator(nn.Module, Mixin):"),
    "a forward calling code of a package": ("import torch.nn as nn\nfrom extlib import prepare\n", "return self.net(prepare(x))"),
    "a forward adding what code of a package gives": ("import torch.nn as nn\nfrom extlib import prepare\n", "return self.net(x) + prepare(x)"),
    "a forward detaching its input": ("import torch.nn as nn\n", "x = x.detach()\n        return self.net(x)"),
    "a forward of another shape (a branch)": ("import torch.nn as nn\n", "if x is None:\n            return x\n        return self.net(x)"),
    "a __call__ of its own": ("import torch.nn as nn\n", "return self.net(x)\n\n    def __call__(self, x):\n        return self.forward(x)"),
}


@pytest.mark.parametrize("variant", sorted(HIDDEN))
def test_a_fact_hidden_from_the_module_leaves_the_call_unread(tmp_path, variant):
    header, changed = HIDDEN[variant]
    nets = NETS.replace("import torch.nn as nn\n", header, 1)
    if changed.startswith("class "):
        nets = nets.replace("class Discriminator(nn.Module):", changed)
    else:
        nets = nets.replace("return self.net(x)", changed)
    assert nets != NETS
    findings = check_file(_project(tmp_path, nets), all_rules()).findings
    assert all(f.hint or f.fix is not FixKind.SAFE for f in findings), findings
    assert not [f for f in findings if f.fix is FixKind.SAFE]


def test_a_name_the_file_binds_again_is_not_the_class(tmp_path):
    train = TRAIN.replace("netD = Discriminator()", "Discriminator = nn.Sequential\nnetD = Discriminator(nn.Linear(8, 1))")
    findings = check_file(_project(tmp_path, train=train), all_rules()).findings
    assert not [f for f in findings if f.fix is FixKind.SAFE and not f.hint]


def test_a_class_imported_under_another_name_is_read(tmp_path):
    """(h62's generated projects: ``from model import Net as Net_``.)"""
    train = TRAIN.replace("from nets import Generator, Discriminator", "from nets import Generator, Discriminator as Critic")
    train = train.replace("netD = Discriminator()", "netD = Critic()")
    findings = check_file(_project(tmp_path, train=train), all_rules()).findings
    assert [(f.code, f.line, f.fix, f.hint) for f in findings] == [("GF005", 22, FixKind.SAFE, False)]


def test_a_class_that_keeps_a_module_bound_elsewhere_is_not_exported():
    """Its instances share that module with whatever else holds it (a teacher and a student of the
    class both hold a module-level layer): what trains them is not the class's to say."""
    assert module_exports(NETS.encode())["Discriminator"].module_class is not None
    kept = NETS.replace("class Discriminator", "SHARED = nn.Linear(8, 8)\n\n\nclass Discriminator").replace(
        "        self.net = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(0.2)",
        "        self.body = SHARED\n        self.net = nn.Sequential(nn.Linear(8, 8), nn.LeakyReLU(0.2)",
    )
    assert "self.body = SHARED" in kept
    assert "Discriminator" not in module_exports(kept.encode())
    assert module_exports(kept.encode())["Generator"].module_class is not None


PAIR = """\
import torch.nn as nn


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2)
        self.b = nn.Linear(3, 2)

    def forward(self, x):
        return self.a(x), self.b(x)
"""


def test_the_items_of_a_class_of_another_module_called_under_no_grad_hold_no_graph(tmp_path):
    """Called with gradients off, the class's items have no graph, and no place for one (the check used to
    stop there with an internal error: world-models' and SimCLR's trainers)."""
    train = _project(
        tmp_path,
        nets=PAIR,
        train="import torch\nfrom nets import Pair\n\nnet = Pair()\nx = torch.randn(4, 3)\nwith torch.no_grad():\n"
        "    left, right = net(x)\nloss = net(x)[0].sum() + left.sum()\nloss.backward()\n",
    )
    assert _run(train).returncode == 0
    report = check_file(train, all_rules(), FixMode.NONE)
    assert (report.internal_errors, report.findings) == ([], [])
