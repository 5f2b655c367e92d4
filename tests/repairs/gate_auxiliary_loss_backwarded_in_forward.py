# https://github.com/deepseek-ai/DeepSeek-MoE/issues/17
"""A mixture-of-experts gate backwards its load-balancing loss inside forward, where the answer
in the thread adds it to the final loss; the training loop then backwards the task loss, which
goes through the same gate."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Gate(nn.Module):
    def __init__(self, dim, experts):
        super().__init__()
        self.scores = nn.Linear(dim, experts)

    def forward(self, x):
        probabilities = F.softmax(self.scores(x), dim=-1)
        load = probabilities.mean(0)
        aux_loss = 0.01 * (load * load).sum() * load.numel()
        aux_loss.backward()
        return probabilities


class MoE(nn.Module):
    def __init__(self, dim=6, experts=3):
        super().__init__()
        self.gate = Gate(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x):
        weights = self.gate(x)
        return sum(weights[:, i : i + 1] * expert(x) for i, expert in enumerate(self.experts))


model = MoE()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, target = torch.randn(8, 6), torch.randn(8, 6)
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
