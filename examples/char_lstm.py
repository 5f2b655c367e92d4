"""A character-level LSTM trained batch by batch on one long sequence.

The hidden state is carried from one batch into the next without being detached, so the
second batch backwards into the first batch's freed graph.
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
vocabulary, width, batch, steps = 30, 32, 4, 10
embedding = nn.Embedding(vocabulary, width)
lstm = nn.LSTM(width, width)
decoder = nn.Linear(width, vocabulary)
modules = nn.ModuleList([embedding, lstm, decoder])
optimizer = torch.optim.SGD(modules.parameters(), lr=0.5)
text = torch.randint(0, vocabulary, (steps * 8 + 1, batch))

hidden = (torch.zeros(1, batch, width), torch.zeros(1, batch, width))
for start in range(0, steps * 8, steps):
    inputs, targets = text[start : start + steps], text[start + 1 : start + steps + 1]
    output, hidden = lstm(embedding(inputs), hidden)
    loss = nn.functional.cross_entropy(decoder(output).view(-1, vocabulary), targets.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.3f}")
