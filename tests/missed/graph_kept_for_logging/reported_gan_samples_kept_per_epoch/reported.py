# https://github.com/udacity/deep-learning-v2-pytorch/pull/106
"""Rebuilt from the face-generation notebook's training loop: after each epoch
the generator's samples for a fixed z are appended to `samples` for later
viewing, computed with grad enabled, so each kept batch of images holds the
generator's graph (the PR: CUDA memory grew at the end of every epoch). The kept
value is an image batch, not a scalar: the fix is torch.no_grad() plus
.detach().cpu(), not .item(), so this is reported only."""
import torch
import torch.nn as nn

torch.manual_seed(0)
z_size = 8
G = nn.Sequential(nn.Linear(z_size, 32), nn.ReLU(), nn.Linear(32, 3 * 4 * 4), nn.Tanh())
D = nn.Sequential(nn.Linear(3 * 4 * 4, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
d_optimizer = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
g_optimizer = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
criterion = nn.BCEWithLogitsLoss()
real_batches = [torch.rand(6, 3 * 4 * 4) * 2 - 1 for _ in range(1)]
fixed_z = torch.randn(4, z_size)
samples = []
losses = []

for epoch in range(5):
    for real_images in real_batches:
        batch_size = real_images.size(0)
        d_optimizer.zero_grad()
        z = torch.randn(batch_size, z_size)
        fake_images = G(z)
        d_loss = criterion(D(real_images), torch.ones(batch_size, 1)) + criterion(D(fake_images.detach()), torch.zeros(batch_size, 1))
        d_loss.backward()
        d_optimizer.step()

        g_optimizer.zero_grad()
        g_loss = criterion(D(fake_images), torch.ones(batch_size, 1))
        g_loss.backward()
        g_optimizer.step()
    losses.append((d_loss.item(), g_loss.item()))

    # generate and save sample, fake images
    G.eval()
    samples_z = G(fixed_z)
    samples.append(samples_z)
    G.train()

print(len(samples), losses[-1])
