# https://github.com/ChandlerBang/pytorch-gnn-meta-attack/issues/1
"""Metattack's get_meta_grad differentiates the attack loss (through the unrolled
inner training) with respect to the adjacency perturbation using
torch.autograd.grad(..., retain_graph=True). Each perturbation step rebuilds the
normalized adjacency and re-runs the inner training, so nothing reuses that graph;
the maintainer confirmed the flag is not needed at the outer stage."""
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import Parameter


def normalize_adj_tensor(adj):
    mx = adj + torch.eye(adj.shape[0])
    r_inv = mx.sum(1).pow(-1 / 2).flatten()
    r_mat_inv = torch.diag(r_inv)
    return r_mat_inv @ mx @ r_mat_inv


class Metattack(nn.Module):
    def __init__(self, nfeat, hidden, nclass, nnodes, train_iters=4, lr=0.1, momentum=0.9, lambda_=0.5):
        super().__init__()
        self.train_iters = train_iters
        self.lr = lr
        self.momentum = momentum
        self.lambda_ = lambda_
        self.adj_changes = Parameter(torch.zeros(nnodes, nnodes))
        self.weights = [Parameter(torch.empty(nfeat, hidden)), Parameter(torch.empty(hidden, nclass))]
        self.w_velocities = [torch.zeros(nfeat, hidden), torch.zeros(hidden, nclass)]

    def _initialize(self):
        for w in self.weights:
            stdv = 1.0 / math.sqrt(w.size(1))
            w.data.uniform_(-stdv, stdv)

    def inner_train(self, features, adj_norm, idx_train, labels):
        self._initialize()
        for ix in range(len(self.weights)):
            self.weights[ix] = self.weights[ix].detach()
            self.weights[ix].requires_grad = True
            self.w_velocities[ix] = self.w_velocities[ix].detach()
            self.w_velocities[ix].requires_grad = True

        for j in range(self.train_iters):
            hidden = features
            for w in self.weights:
                hidden = adj_norm @ hidden @ w
            output = F.log_softmax(hidden, dim=1)
            loss_labeled = F.nll_loss(output[idx_train], labels[idx_train])
            weight_grads = torch.autograd.grad(loss_labeled, self.weights, create_graph=True)
            self.w_velocities = [self.momentum * v + g for v, g in zip(self.w_velocities, weight_grads)]
            self.weights = [w - self.lr * v for w, v in zip(self.weights, self.w_velocities)]

    def get_meta_grad(self, features, adj_norm, idx_train, idx_unlabeled, labels, labels_self_training):
        hidden = features
        for w in self.weights:
            hidden = adj_norm @ hidden @ w
        output = F.log_softmax(hidden, dim=1)
        loss_labeled = F.nll_loss(output[idx_train], labels[idx_train])
        loss_unlabeled = F.nll_loss(output[idx_unlabeled], labels_self_training[idx_unlabeled])
        attack_loss = self.lambda_ * loss_labeled + (1 - self.lambda_) * loss_unlabeled

        adj_grad = torch.autograd.grad(attack_loss, self.adj_changes)[0]
        print(f"attack loss: {attack_loss.item():.4f}")
        return adj_grad

    def forward(self, features, ori_adj, labels, idx_train, idx_unlabeled, labels_self_training, perturbations):
        for i in range(perturbations):
            adj_changes_square = self.adj_changes - torch.diag(torch.diag(self.adj_changes, 0))
            adj_changes_symm = torch.clamp(adj_changes_square + adj_changes_square.t(), -1, 1)
            modified_adj = adj_changes_symm + ori_adj

            adj_norm = normalize_adj_tensor(modified_adj)
            self.inner_train(features, adj_norm, idx_train, labels)
            adj_grad = self.get_meta_grad(features, adj_norm, idx_train, idx_unlabeled, labels, labels_self_training)

            adj_meta_grad = adj_grad * (-2 * modified_adj + 1)
            adj_meta_grad -= adj_meta_grad.min()
            adj_meta_grad -= torch.diag(torch.diag(adj_meta_grad, 0))
            adj_meta_argmax = torch.argmax(adj_meta_grad)
            row_idx, col_idx = divmod(adj_meta_argmax.item(), ori_adj.shape[1])
            self.adj_changes.data[row_idx][col_idx] += -2 * modified_adj[row_idx][col_idx].item() + 1
            self.adj_changes.data[col_idx][row_idx] += -2 * modified_adj[row_idx][col_idx].item() + 1
        return self.adj_changes + ori_adj


torch.manual_seed(0)
nnodes, nfeat, nclass = 10, 6, 3
features = torch.randn(nnodes, nfeat)
upper = torch.triu((torch.rand(nnodes, nnodes) < 0.3).float(), diagonal=1)
ori_adj = upper + upper.t()
labels = torch.randint(0, nclass, (nnodes,))
idx_train = torch.arange(0, 5)
idx_unlabeled = torch.arange(5, nnodes)
labels_self_training = labels.clone()
labels_self_training[idx_unlabeled] = torch.randint(0, nclass, (len(idx_unlabeled),))

attacker = Metattack(nfeat, hidden=8, nclass=nclass, nnodes=nnodes)
modified_adj = attacker(features, ori_adj, labels, idx_train, idx_unlabeled, labels_self_training, perturbations=3)
print(f"edges flipped: {int((modified_adj - ori_adj).abs().sum().item() // 2)}")
