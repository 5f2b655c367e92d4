# https://github.com/OpenNMT/OpenNMT-py/issues/1148
"""Truncated BPTT over a long target: the decoder's state object (hidden state and input feed) is
carried from one truncation window to the next. The state has a detach() of its own, which the
loop no longer calls; each window steps the optimizer."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class DecoderState:
    def __init__(self, hidden, input_feed):
        self.hidden, self.input_feed = hidden, input_feed

    def detach(self):
        self.hidden = tuple(h.detach() for h in self.hidden)
        self.input_feed = self.input_feed.detach()


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(6, 6)
        self.out = nn.Linear(6, 4)

    def forward(self, inputs, state):
        outputs = []
        for x in inputs:
            h, c = self.cell(x + state.input_feed, state.hidden)
            state.hidden, state.input_feed = (h, c), torch.tanh(h)
            outputs.append(self.out(h))
        return torch.stack(outputs)


decoder = Decoder()
optimizer = torch.optim.SGD(decoder.parameters(), lr=0.1)
target = torch.randint(0, 4, (9, 2))
inputs = torch.randn(9, 2, 6)
state = DecoderState((torch.zeros(2, 6), torch.zeros(2, 6)), torch.zeros(2, 6))
for start in range(0, 9, 3):
    logits = decoder(inputs[start : start + 3], state)
    loss = F.cross_entropy(logits.reshape(-1, 4), target[start : start + 3].reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
