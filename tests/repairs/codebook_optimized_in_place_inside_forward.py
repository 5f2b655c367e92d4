# https://github.com/minyoungg/vqtorch/issues/3
"""A vector quantizer that optimizes its codebook in place inside its forward (its own optimizer
steps on a codebook loss there), then passes the encoder's output on straight through. The
codebook loss reaches the encoder's output too, so its backward frees the encoder's graph, which
the reconstruction loss backwards through afterwards."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class InPlaceQuantizer(nn.Module):
    def __init__(self, codes, dim):
        super().__init__()
        self.codebook = nn.Parameter(torch.randn(codes, dim))
        self.codebook_optimizer = torch.optim.SGD([self.codebook], lr=0.5)

    def forward(self, z):
        distances = torch.cdist(z, self.codebook)
        nearest = self.codebook[distances.argmin(dim=1)]
        if self.training:
            codebook_loss = F.mse_loss(nearest, z)
            codebook_loss.backward()
            self.codebook_optimizer.step()
            self.codebook_optimizer.zero_grad()
            nearest = self.codebook[distances.argmin(dim=1)]
        return z + (nearest - z).detach()


encoder = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
quantizer = InPlaceQuantizer(8, 4)
decoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 12))
optimizer = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=0.01)
data = torch.randn(64, 12)
for step in range(5):
    batch = data[step * 8 : (step + 1) * 8]
    reconstruction = decoder(quantizer(encoder(batch)))
    loss = F.mse_loss(reconstruction, batch)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("CHECKSUM", sum(p.sum().item() for m in (encoder, quantizer, decoder) for p in m.parameters()))
