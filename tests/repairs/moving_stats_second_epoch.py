# https://github.com/ShusenTang/Dive-into-DL-PyTorch/issues/129
"""Batch norm written by hand: the moving statistics are updated from the batch statistics, graph
and all. From the second epoch the layer normalizes with them (a warm-up recipe), so the first
backward that reads them walks into the first epoch's freed graphs: the first epoch runs clean."""
import torch
import torch.nn as nn

torch.manual_seed(0)


def batch_norm(x, gamma, beta, moving_mean, moving_var, use_moving, momentum=0.9):
    if use_moving:
        x_hat = (x - moving_mean) / torch.sqrt(moving_var + 1e-5)
    else:
        mean, var = x.mean(dim=0), ((x - x.mean(dim=0)) ** 2).mean(dim=0)
        x_hat = (x - mean) / torch.sqrt(var + 1e-5)
        moving_mean = momentum * moving_mean + (1.0 - momentum) * mean
        moving_var = momentum * moving_var + (1.0 - momentum) * var
    return gamma * x_hat + beta, moving_mean, moving_var


class BatchNorm(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.moving_mean = torch.zeros(features)
        self.moving_var = torch.ones(features)
        self.use_moving = False

    def forward(self, x):
        y, self.moving_mean, self.moving_var = batch_norm(
            x, self.gamma, self.beta, self.moving_mean, self.moving_var, self.use_moving
        )
        return y


net = nn.Sequential(nn.Linear(6, 8), BatchNorm(8), nn.ReLU(), nn.Linear(8, 3))
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
batches = [(torch.randn(16, 6), torch.randint(0, 3, (16,))) for _ in range(4)]

for epoch in range(2):
    net[1].use_moving = epoch > 0
    for x, y in batches:
        loss = nn.functional.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
