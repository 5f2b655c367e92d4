# invented: a forward hook fills a feature buffer once (FitNets-style hint targets) and every step reuses it
"""Hint training: a forward hook on the teacher's middle layer appends the layer's
output to a list; the teacher is run once on a fixed batch to fill it, and the
student's regressor is trained in nested epoch and batch loops to match those hint
features. The hook stores the output with the teacher's graph, so the second batch
backwards through the part the first batch already freed."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
student = nn.Sequential(nn.Linear(6, 8), nn.ReLU())
regressor = nn.Linear(8, 16)
optimizer = torch.optim.SGD(list(student.parameters()) + list(regressor.parameters()), lr=0.05)

features = []


def save_features(module, input, output):
    features.append(output)


handle = teacher[3].register_forward_hook(save_features)
x = torch.randn(12, 6)
teacher(x)
handle.remove()
hints = features[0]

for epoch in range(3):
    for start in range(0, 12, 4):
        guided = regressor(student(x[start:start + 4]))
        loss = F.mse_loss(guided, hints[start:start + 4])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: hint loss {loss.item():.4f}")
