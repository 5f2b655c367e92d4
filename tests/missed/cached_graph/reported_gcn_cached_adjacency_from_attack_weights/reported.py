# https://github.com/sigeisler/robustness_of_gnns_at_scale/issues/4
"""A GCN that caches its preprocessed (normalized) adjacency the first time it
runs in training mode. The PR-BCD attack feeds it edge weights that are being
optimized (perturbed_edge_weight requires grad); with the model switched to
train() the cache keeps the first step's normalized adjacency, graph included,
and the second attack step backwards through it again. A .detach() on the cache
would silence the error and cut the gradient to the perturbation the attack is
optimizing; the fix from the thread is to switch the caching off, so this is only
reported."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class GCN(nn.Module):
    def __init__(self, n_features, n_classes, n_filters=8, do_cache_adj_prep=True):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(n_features, n_filters), nn.Linear(n_filters, n_classes)])
        self.do_cache_adj_prep = do_cache_adj_prep
        self.adj_preped = None

    def _convert_and_normalize(self, x, edge_idx, edge_weight):
        n = x.shape[0]
        adj = torch.zeros(n, n).index_put((edge_idx[0], edge_idx[1]), edge_weight, accumulate=True)
        adj = adj + torch.eye(n)
        deg_inv_sqrt = adj.sum(0).pow(-0.5)
        return deg_inv_sqrt[:, None] * adj * deg_inv_sqrt[None, :]

    def _cache_if_option_is_set(self, callable, *inputs):
        if self.training and self.adj_preped is not None:
            return self.adj_preped
        adj_preped = callable(*inputs)
        if self.training and self.do_cache_adj_prep:
            self.adj_preped = adj_preped
        return adj_preped

    def forward(self, x, adj):
        edge_idx, edge_weight = adj
        adj_norm = self._cache_if_option_is_set(self._convert_and_normalize, x, edge_idx, edge_weight)
        x = F.relu(adj_norm @ self.layers[0](x))
        return F.log_softmax(adj_norm @ self.layers[1](x), dim=1)


def grad_with_checkpoint(outputs, inputs):
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    for input in inputs:
        input.grad = None
    outputs.backward()
    return [input.grad.clone() for input in inputs]


torch.manual_seed(0)
n, n_features, n_classes = 8, 5, 3
x = torch.randn(n, n_features)
labels = torch.randint(0, n_classes, (n,))
edge_index = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 6], [1, 0, 2, 1, 4, 3, 6, 5]])
candidates = torch.tensor([[0, 2, 3, 5], [7, 4, 6, 1]])
model = GCN(n_features, n_classes)
model.train()

perturbed_edge_weight = torch.full((candidates.shape[1],), 1e-3, requires_grad=True)
for step in range(3):
    edge_idx = torch.cat([edge_index, candidates, candidates.flip(0)], dim=1)
    edge_weight = torch.cat([torch.ones(edge_index.shape[1]), perturbed_edge_weight, perturbed_edge_weight])
    logits = model(x, (edge_idx, edge_weight))
    loss = -F.nll_loss(logits, labels)
    gradient = grad_with_checkpoint(loss, perturbed_edge_weight)[0]
    with torch.no_grad():
        perturbed_edge_weight.add_(0.1 * gradient).clamp_(0, 1)
    print(f"step {step}: attack loss {loss.item():.4f}")
