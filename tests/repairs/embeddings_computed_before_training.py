# https://github.com/vec2text/vec2text/issues/20
"""Embeddings computed once, before training, by an embedder that the same optimizer trains; the
training function reads them every epoch. Computing them on the fly (every call) trains the
embedder; the first backward freed the graph of the precomputed ones."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
embedder = nn.Embedding(10, 6)
inverter = nn.Linear(6, 10)
optimizer = torch.optim.Adam([*embedder.parameters(), *inverter.parameters()], lr=0.01)
token_ids = torch.randint(0, 10, (12,))
frozen_embeddings = embedder(token_ids)


def train_epoch():
    logits = inverter(torch.tanh(frozen_embeddings))
    loss = F.cross_entropy(logits, token_ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for epoch in range(3):
    train_epoch()
