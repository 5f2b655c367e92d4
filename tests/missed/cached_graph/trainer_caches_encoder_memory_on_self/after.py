# invented: encoder outputs stored on a trainer object in __init__ and replayed by every training step
"""A captioning trainer runs the (pretrained, not fine-tuned) image encoder once
in __init__ to save time and keeps the memory on self; each train_step decodes a
batch of captions against the stored memory. The encoder was only left out of the
optimizer, so self.memory carries its graph and the second step backwards through
the part the first step freed."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM = 15, 12


class CaptionDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.rnn = nn.GRU(DIM, DIM, batch_first=True)
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, memory, tokens):
        output, _ = self.rnn(self.embed(tokens), memory.unsqueeze(0))
        return self.out(output)


class CaptionTrainer:
    def __init__(self, encoder, decoder, images, captions):
        self.decoder = decoder
        self.captions = captions
        self.memory = encoder(images).detach()
        self.optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-2)

    def train_step(self, idx):
        tokens = self.captions[idx]
        logits = self.decoder(self.memory[idx], tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


torch.manual_seed(0)
encoder = nn.Sequential(nn.Flatten(), nn.Linear(3 * 6 * 6, 32), nn.ReLU(), nn.Linear(32, DIM), nn.Tanh())
trainer = CaptionTrainer(encoder, CaptionDecoder(), torch.rand(8, 3, 6, 6), torch.randint(0, VOCAB, (8, 6)))
for epoch in range(2):
    for start in range(0, 8, 4):
        loss = trainer.train_step(torch.arange(start, start + 4))
    print(f"epoch {epoch}: loss {loss:.4f}")
