# https://github.com/facebookresearch/DomainBed/issues/50
"""Inter-environment gradient agreement: the loss gradients of each environment are taken with
autograd.grad and their spread is a penalty added to the mean loss; without create_graph the
gradients carry no graph, and taking them freed the losses' graph the final backward needs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
network = nn.Linear(4, 2)
optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
environments = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(2)]

for step in range(3):
    losses = [F.cross_entropy(network(x), y) for x, y in environments]
    mean_loss = sum(losses) / len(losses)
    mean_grad = torch.autograd.grad(mean_loss, list(network.parameters()))
    penalty = 0.0
    for loss in losses:
        grads = torch.autograd.grad(loss, list(network.parameters()), retain_graph=True)
        penalty = penalty + sum((g - m).pow(2).sum() for g, m in zip(grads, mean_grad))
    optimizer.zero_grad()
    (mean_loss + 0.5 * penalty).backward()
    optimizer.step()
