"""A debugging session left a second backward call behind."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
criterion = nn.CrossEntropyLoss()

for step in range(20):
    inputs, labels = torch.randn(16, 8), torch.randint(0, 2, (16,))
    optimizer.zero_grad()
    loss = criterion(model(inputs), labels)
    loss.backward()
    print("grad norm", model[0].weight.grad.norm().item())
    loss.backward()
    optimizer.step()
