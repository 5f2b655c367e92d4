# invented: a module-level global holding a network's output, read by a train_step function called in the loop
"""A universal targeted perturbation: the mean embedding of a handful of target
images is computed once into a module-level global, and train_step (called for
every batch) moves the perturbed inputs' embedding towards it. The encoder is
frozen only by leaving it out of the optimizer, so TARGET_EMBEDDING keeps the
encoder's graph and the second call backwards through it again."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 8))
delta = torch.zeros(10, requires_grad=True)
optimizer = torch.optim.Adam([delta], lr=0.05)
EPSILON = 0.5

TARGET_EMBEDDING = encoder(torch.randn(5, 10)).mean(0).detach()


def train_step(x):
    embedding = encoder(x + delta)
    loss = F.mse_loss(embedding, TARGET_EMBEDDING.expand_as(embedding))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        delta.clamp_(-EPSILON, EPSILON)
    return loss.item()


data = torch.randn(24, 10)
for epoch in range(2):
    for start in range(0, 24, 8):
        loss = train_step(data[start:start + 8])
    print(f"epoch {epoch}: loss {loss:.4f}")
