# https://github.com/OpenNMT/OpenNMT-py/issues/403
"""The decoder state is an object holding the LSTM (h, c) and the input feed;
its detach() method rebinds a loop variable (`h = h.detach()`), which leaves
the stored tensors untouched, so the state still carries the previous batch's
graph into the next truncated-BPTT chunk. Reported: the state is a user class."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class RNNDecoderState:
    def __init__(self, hidden, input_feed):
        self.hidden = hidden
        self.input_feed = input_feed

    @property
    def _all(self):
        return self.hidden + (self.input_feed,)

    def detach(self):
        for h in self._all:
            h = h.detach()

    def update_state(self, hidden, input_feed):
        self.hidden = hidden
        self.input_feed = input_feed


class InputFeedDecoder(nn.Module):
    def __init__(self, emb_size=6, hidden_size=8, vocab=11):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, emb_size)
        self.cell = nn.LSTMCell(emb_size + hidden_size, hidden_size)
        self.out = nn.Linear(hidden_size, vocab)

    def forward(self, tgt, state):
        hidden, input_feed = state.hidden, state.input_feed
        logits = []
        for emb_t in self.embeddings(tgt):
            h, c = self.cell(torch.cat([emb_t, input_feed], dim=1), hidden)
            hidden, input_feed = (h, c), h
            logits.append(self.out(h))
        state.update_state(hidden, input_feed)
        return torch.stack(logits)


batch, hidden_size = 2, 8
decoder = InputFeedDecoder(hidden_size=hidden_size)
optimizer = torch.optim.SGD(decoder.parameters(), lr=0.1)
zeros = torch.zeros(batch, hidden_size)
state = RNNDecoderState((zeros, zeros), zeros)
sequence = torch.randint(0, 11, (13, batch))

for j in range(0, 12, 4):
    tgt, gold = sequence[j:j + 4], sequence[j + 1:j + 5]
    state.detach()
    logits = decoder(tgt, state)
    loss = nn.functional.cross_entropy(logits.reshape(-1, 11), gold.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"chunk {j}: {loss.item():.4f}")
