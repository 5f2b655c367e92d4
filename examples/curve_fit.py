"""Fitting a small network to a curve: the prediction is computed once, before the loop."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.linspace(-2, 2, 50).unsqueeze(1)
y = torch.sin(2 * x)

prediction = model(x)
for epoch in range(100):
    loss = nn.functional.mse_loss(prediction, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
