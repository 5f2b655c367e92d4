# https://github.com/mosaicml/composer/pull/1240
"""A model that returns a tuple of losses computed from one forward; the trainer backwards each
loss of the tuple in turn."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.first, self.second = nn.Linear(8, 3), nn.Linear(8, 1)

    def loss(self, x, labels, targets):
        features = torch.relu(self.body(x))
        return F.cross_entropy(self.first(features), labels), F.mse_loss(self.second(features).squeeze(1), targets)


model = TwoHeads()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, labels, targets = torch.randn(6, 5), torch.randint(0, 3, (6,)), torch.randn(6)
    optimizer.zero_grad()
    losses = model.loss(x, labels, targets)
    for loss in losses:
        loss.backward()
    optimizer.step()
