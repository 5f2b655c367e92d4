# https://github.com/Liuhong99/Sophia/issues/1
"""Every other step, a diagonal Hessian estimate backwards a loss on labels sampled from the
model's own logits; the logits are the training step's, whose graph its backward freed and whose
weights its step changed since."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
VOCAB = 12
model = nn.Sequential(nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
hessian = [torch.zeros_like(p) for p in model.parameters()]
tokens = torch.randint(0, VOCAB, (6, 9))
inputs, labels = tokens[:, :-1], tokens[:, 1:]

for step in range(4):
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 2 == 1:
        sampled = torch.distributions.Categorical(logits=logits).sample()
        sampled_loss = F.cross_entropy(logits.reshape(-1, VOCAB), sampled.reshape(-1))
        sampled_loss.backward()
        with torch.no_grad():
            for estimate, p in zip(hessian, model.parameters()):
                if p.grad is not None:
                    estimate.mul_(0.9).add_(p.grad * p.grad, alpha=0.1)
        optimizer.zero_grad(set_to_none=True)
    print(f"step {step}: {loss.item():.4f}")
