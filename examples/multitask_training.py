"""Multi-task training: one encoder, a regression head and a classification head.

Each loss is backwarded on its own, so the second backward walks through the encoder graph
the first one freed. Run it: RuntimeError: Trying to backward through the graph a second time.
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU())
regression_head = nn.Linear(32, 1)
class_head = nn.Linear(32, 4)
parameters = [*encoder.parameters(), *regression_head.parameters(), *class_head.parameters()]
optimizer = torch.optim.Adam(parameters, lr=1e-3)
data = TensorDataset(torch.randn(64, 16), torch.randn(64, 1), torch.randint(0, 4, (64,)))

for epoch in range(2):
    for inputs, value, label in DataLoader(data, batch_size=16):
        features = encoder(inputs)
        regression_loss = nn.functional.mse_loss(regression_head(features), value)
        class_loss = nn.functional.cross_entropy(class_head(features), label)
        optimizer.zero_grad()
        regression_loss.backward()
        class_loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: {regression_loss.item():.3f} {class_loss.item():.3f}")
