# https://github.com/fastai/course22/issues/58
"""Fitting a quadratic by hand, as a notebook does it: the cell that computes the predictions and
the loss ran once, and the cell that backwards and updates the coefficients is run in a loop."""
import torch

torch.manual_seed(0)
x = torch.linspace(-2, 2, 20)
y = 3 * x**2 + 2 * x + 1 + 0.1 * torch.randn(20)
abc = torch.tensor([1.0, 1.0, 1.0], requires_grad=True)

predictions = abc[0] * x**2 + abc[1] * x + abc[2]
loss = torch.abs(predictions - y).mean()

for i in range(5):
    loss.backward()
    with torch.no_grad():
        abc -= abc.grad * 0.01
        abc.grad.zero_()
