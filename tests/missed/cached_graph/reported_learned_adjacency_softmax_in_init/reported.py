# invented: a value that must train, built in __init__ from the module's own parameter and reused by forward
"""A graph-learning layer keeps a learnable adjacency logit matrix and, to save
work, row-normalizes it once in __init__ (self.adj = self.weight.softmax(-1)).
forward uses self.adj, so the first backward frees the softmax's graph and the
second raises the error. The adjacency is meant to train: a .detach() would hide
the error and freeze it at its initial value. It must be recomputed in forward,
so this is only reported."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class LearnedGraphConv(nn.Module):
    def __init__(self, num_nodes, in_dim, out_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(num_nodes, num_nodes) * 0.1)
        self.adj = self.weight.softmax(-1)
        self.linear = nn.Linear(in_dim, out_dim)

    def forward(self, x):
        return self.adj @ self.linear(x)


torch.manual_seed(0)
layer = LearnedGraphConv(num_nodes=6, in_dim=4, out_dim=2)
optimizer = torch.optim.Adam(layer.parameters(), lr=1e-2)
x, y = torch.randn(6, 4), torch.randn(6, 2)
for step in range(3):
    loss = F.mse_loss(layer(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
