# https://github.com/SNAS-Series/SNAS-Series/issues/10
"""The architecture parameters' gradients of each loss term are recorded for analysis by a helper
that backwards each term alone; the step then backwards the total. The helper zeroes what it
recorded, so only the total's backward reaches the step."""
import torch
import torch.nn as nn

torch.manual_seed(0)
weights = nn.Linear(4, 4)
log_alpha = nn.Parameter(torch.zeros(4))
optimizer = torch.optim.SGD([*weights.parameters(), log_alpha], lr=0.05)
recorded = []


def record_alpha_gradients(error_loss, resource_loss):
    error_loss.backward()
    resource_loss.backward()
    recorded.append(log_alpha.grad.norm().item())
    optimizer.zero_grad()


for step in range(3):
    x = torch.randn(5, 4)
    mixed = weights(x) * torch.softmax(log_alpha, 0)
    error_loss = mixed.pow(2).mean()
    resource_loss = torch.softmax(log_alpha, 0).max() + 0.1 * mixed.abs().mean()
    optimizer.zero_grad()
    record_alpha_gradients(error_loss, resource_loss)
    loss = error_loss + resource_loss
    loss.backward()
    optimizer.step()
