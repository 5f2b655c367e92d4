# invented: retain_graph=True that hides a cached graph (GF006) instead of being a leftover
"""Offline distillation on a fixed batch: the teacher's soft targets are computed
once before the loop without a detach, so every step's loss backwards into the
teacher's graph again. retain_graph=True is what keeps that graph alive, and
removing it alone would raise the error; the real fix is detaching the cached
targets, after which the flag is needless."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 4))
student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
x = torch.randn(16, 6)
T = 2.0

soft_targets = F.softmax(teacher(x) / T, dim=1)
for epoch in range(5):
    log_probs = F.log_softmax(student(x) / T, dim=1)
    loss = F.kl_div(log_probs, soft_targets, reduction="batchmean") * T * T
    optimizer.zero_grad()
    loss.backward(retain_graph=True)
    optimizer.step()
    print(f"epoch {epoch}: kd loss {loss.item():.4f}")
