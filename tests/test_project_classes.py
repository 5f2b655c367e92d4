"""A project's own nn.Module classes, read across files (``analysis.class_exports``): a file that
builds ``Discriminator()`` from ``nets`` knows what the analysis of ``nets`` proved of calling it,
as it knows its own classes; each fact hidden from that analysis leaves the call unread."""

import textwrap

from gradfix.codemods.check import module_exports

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


def test_a_module_exports_what_calling_its_module_class_does():
    exported = module_exports(NETS.encode())["Discriminator"].module_class
    assert exported is not None
    assert (exported.returns_parameters, exported.returns_inputs, exported.returns_saved) == (True, True, True)
    assert exported.reads_modelled_code and not exported.returns_unread
