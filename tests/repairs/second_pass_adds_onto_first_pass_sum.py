# https://github.com/davda54/sam/issues/10
"""Sharpness-aware training of a two-task model: the task losses are summed into `total` for the
first pass; the second pass, at the perturbed weights, adds its task losses onto the same
`total`, whose first-pass graph the first backward freed. The perturbation moves the weights in
place, so even keeping every graph fails."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SharpnessAware:
    def __init__(self, params, rho=0.05):
        self.params = list(params)
        self.rho = rho
        self.base = torch.optim.SGD(self.params, lr=0.05)

    @torch.no_grad()
    def climb(self):
        norm = torch.stack([p.grad.norm() for p in self.params if p.grad is not None]).norm()
        self.moved = []
        for p in self.params:
            shift = p.grad * (self.rho / (norm + 1e-12)) if p.grad is not None else torch.zeros_like(p)
            p.add_(shift)
            self.moved.append(shift)
        self.base.zero_grad()

    @torch.no_grad()
    def descend(self):
        for p, shift in zip(self.params, self.moved):
            p.sub_(shift)
        self.base.step()
        self.base.zero_grad()


trunk = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
heads = nn.ModuleList([nn.Linear(12, 1), nn.Linear(12, 1)])
optimizer = SharpnessAware([*trunk.parameters(), *heads.parameters()])
for step in range(3):
    x, targets = torch.randn(8, 6), torch.randn(8, 2)
    features = trunk(x)
    total = 0
    for task, head in enumerate(heads):
        total += F.mse_loss(head(features).squeeze(1), targets[:, task])
    total.backward()
    optimizer.climb()
    features = trunk(x)
    for task, head in enumerate(heads):
        total += F.mse_loss(head(features).squeeze(1), targets[:, task])
    total.backward()
    optimizer.descend()
    print(f"step {step}: {total.item():.4f}")
