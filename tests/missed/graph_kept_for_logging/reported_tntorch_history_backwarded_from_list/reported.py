# https://github.com/rballester/tntorch/pull/19
"""Rebuilt from tntorch's optimize() before the fix: the summed loss is appended
to `losses`, the stopping test does tensor arithmetic on the last entries, and
the step backwards losses[-1] with retain_graph=True. Every kept loss holds its
full graph, saved tensors included (the PR: a 12 GB machine froze within 1000
iterations). Appending loss.item() would break losses[-1].backward(); the fix
backwards the sum first and keeps a detached copy, so this is reported only."""
from functools import reduce

import torch


def optimize(tensors, loss_function, optimizer=torch.optim.Adam, tol=1e-4, max_iter=6):
    parameters = [t for t in tensors if t.requires_grad]
    optimizer = optimizer(parameters)
    losses = []
    converged = False
    iter = 0
    while True:
        optimizer.zero_grad()
        loss = loss_function(*tensors)
        if not isinstance(loss, (tuple, list)):
            loss = [loss]
        losses.append(reduce(lambda x, y: x + y, loss))
        if len(losses) >= 2:
            delta_loss = losses[-1] - losses[-2]
        else:
            delta_loss = float("-inf")
        if iter >= 2 and tol is not None and (losses[-1] <= tol or -delta_loss / losses[-1] <= tol) and losses[-2] - \
                losses[-1] < losses[-3] - losses[-2]:
            converged = True
            break
        if iter == max_iter:
            break
        losses[-1].backward(retain_graph=True)
        optimizer.step()
        iter += 1
    print("iter:", iter, "| loss:", losses[-1].item(), "| converged:", converged)


torch.manual_seed(0)
full = torch.randn(8, 8)
core_a = torch.randn(8, 3, requires_grad=True)
core_b = torch.randn(3, 8, requires_grad=True)


def loss_function(a, b):
    fit = torch.norm(a @ b - full) ** 2 / torch.norm(full) ** 2
    reg = 1e-3 * (a.pow(2).sum() + b.pow(2).sum())
    return fit, reg


optimize([core_a, core_b], loss_function)
