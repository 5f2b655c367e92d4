# https://github.com/davda54/sam/issues/10
"""SAM with a multi-task loss summed in a loop: the second pass recomputes the
forward but keeps adding task losses onto the first pass's `loss` instead of
starting from zero, so the second backward walks the freed first graph. The fix
is to reset the accumulator, not to delete a backward, so it is only reported."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        norm = torch.norm(torch.stack([p.grad.norm() for g in self.param_groups for p in g["params"] if p.grad is not None]))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                e_w = p.grad * group["rho"] / (norm + 1e-12)
                p.add_(e_w)
                self.state[p]["e_w"] = e_w
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if "e_w" in self.state[p]:
                    p.sub_(self.state[p]["e_w"])
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


def get_loss(output, target, t):
    return nn.functional.binary_cross_entropy_with_logits(output[:, t], target[:, t])


num_tasks = 3
model = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, num_tasks))
optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)

for step in range(2):
    image = torch.randn(4, 10)
    target = torch.randint(0, 2, (4, num_tasks)).float()

    output = model(image)
    loss = 0
    for t in range(num_tasks):
        loss += get_loss(output, target, t)
    optimizer.zero_grad()
    loss.backward()
    optimizer.first_step(zero_grad=True)

    output = model(image)
    for t in range(num_tasks):
        loss += get_loss(output, target, t)
    loss.backward()
    optimizer.second_step(zero_grad=True)
    print(f"step {step}: {loss.item():.4f}")
