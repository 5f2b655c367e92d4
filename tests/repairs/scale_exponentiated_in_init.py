# https://github.com/IceLab-X/MiniGP/issues/13
"""A kernel's length scale is kept as a log parameter (trained) and exponentiated once, in
__init__; forward uses the exponentiated value, whose graph the first backward frees."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RBFKernel(nn.Module):
    def __init__(self, length_scale=1.0):
        super().__init__()
        self.log_length_scale = nn.Parameter(torch.tensor(length_scale).log())
        self.length_scale = self.log_length_scale.exp()

    def forward(self, a, b):
        distances = (a.unsqueeze(1) - b.unsqueeze(0)).pow(2).sum(-1)
        return torch.exp(-0.5 * distances / self.length_scale**2)


kernel = RBFKernel()
weights = nn.Parameter(torch.zeros(8))
optimizer = torch.optim.Adam([kernel.log_length_scale, weights], lr=0.05)
x, y = torch.randn(8, 2), torch.randn(8)
for step in range(3):
    prediction = kernel(x, x) @ weights
    loss = (prediction - y).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
