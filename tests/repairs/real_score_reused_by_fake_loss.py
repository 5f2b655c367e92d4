# https://github.com/open-mmlab/mmagic/issues/83
"""A relativistic discriminator's loss split in two backwards: the real part first, then the fake
part, which compares against the real scores kept from the first part (scored with instance noise,
so they cannot be computed again)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
generator = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
discriminator = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)

for step in range(3):
    real, z = torch.randn(5, 6), torch.randn(5, 4)
    fake = generator(z).detach()
    optimizer_d.zero_grad()
    pred_d_fake = discriminator(fake).detach()
    pred_d_real = discriminator(real + 0.05 * torch.randn_like(real))
    l_d_real = F.binary_cross_entropy_with_logits(pred_d_real - pred_d_fake.mean(), torch.ones_like(pred_d_real)) * 0.5
    l_d_real.backward()
    pred_d_fake = discriminator(fake)
    l_d_fake = F.binary_cross_entropy_with_logits(pred_d_fake - pred_d_real.mean(), torch.zeros_like(pred_d_fake)) * 0.5
    l_d_fake.backward()
    optimizer_d.step()
