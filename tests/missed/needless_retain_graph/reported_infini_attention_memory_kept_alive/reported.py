# https://github.com/jlamprou/Infini-Attention/issues/3
"""Infini-attention trained segment by segment with gradient accumulation: the
compressive memory (M, z) is updated from each segment's keys and values and
handed to the next segment without a detach, so each segment's loss reaches back
into the previous segments' graphs and the per-segment backward only works with
retain_graph=True. Removing the flag here would raise the error; the fix the
maintainer gave is detaching M and z in the memory update, after which the flag
is not needed."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, SEG_LEN = 16, 8, 4


class InfiniAttentionLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.gate = nn.Parameter(torch.zeros(1))
        self.out = nn.Linear(DIM, VOCAB)

    def _update_memory(self, k, v, M, z):
        sigma_k = F.elu(k) + 1
        return M + sigma_k.transpose(-2, -1) @ v, z + sigma_k.sum(dim=-2)

    def forward(self, tokens, M, z):
        q, k, v = self.qkv(self.embed(tokens)).chunk(3, dim=-1)
        sigma_q = F.elu(q) + 1
        a_mem = (sigma_q @ M) / ((sigma_q @ z.unsqueeze(-1)) + 1e-6)
        causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool).tril()
        a_dot = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        g = torch.sigmoid(self.gate)
        M, z = self._update_memory(k, v, M, z)
        return self.out(g * a_mem + (1 - g) * a_dot), M, z


torch.manual_seed(0)
model = InfiniAttentionLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, VOCAB, (6, 3 * SEG_LEN + 1))

for start in range(0, 6, 2):
    batch = data[start:start + 2]
    M, z = torch.zeros(2, DIM, DIM), torch.ones(2, DIM)
    for s in range(0, 3 * SEG_LEN, SEG_LEN):
        inputs, labels = batch[:, s:s + SEG_LEN], batch[:, s + 1:s + SEG_LEN + 1]
        logits, M, z = model(inputs, M, z)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)) / 3
        loss.backward(retain_graph=True)
    optimizer.step()
    optimizer.zero_grad()
    print(f"batch {start // 2}: last segment loss {3 * loss.item():.4f}")
