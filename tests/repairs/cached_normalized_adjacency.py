# https://github.com/sigeisler/robustness_of_gnns_at_scale/issues/4
"""A GCN layer caches its normalized adjacency on the first call. The attack learns the edge
weights the normalization is computed from, so the cached adjacency holds the first call's graph;
the maintainer's advice: switch the caching off."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class CachedGCN(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.linear = nn.Linear(features, classes)
        self._cached_adjacency = None

    def forward(self, x, adjacency):
        if self._cached_adjacency is None:
            degree = adjacency.sum(1)
            self._cached_adjacency = adjacency / degree.unsqueeze(1)
        return self._cached_adjacency @ self.linear(x)


nodes = 6
model = CachedGCN(3, 2)
x, labels = torch.randn(nodes, 3), torch.randint(0, 2, (nodes,))
edge_weights = nn.Parameter(torch.rand(nodes, nodes))
attack = torch.optim.SGD([edge_weights], lr=0.1)
for step in range(3):
    adjacency = torch.sigmoid(edge_weights) + torch.eye(nodes)
    loss = -nn.functional.cross_entropy(model(x, adjacency), labels)
    attack.zero_grad()
    loss.backward()
    attack.step()
