# https://github.com/huggingface/transformers/pull/6999
"""Rebuilt from the Trainer of that time: training_step backwards the loss and
returns it, and train() sums the returned tensors into tr_loss for logging.
tr_loss chains every step's graph (the PR: "some variables are kept forever for
a backward pass that is never called")."""
import torch
import torch.nn as nn


class TinyClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.head = nn.Linear(8, 2)

    def forward(self, input_ids, labels):
        logits = self.head(self.emb(input_ids).mean(dim=1))
        return (nn.functional.cross_entropy(logits, labels), logits)


class Trainer:
    def __init__(self, model, batches, logging_steps=10):
        self.model = model
        self.batches = batches
        self.logging_steps = logging_steps
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)

    def training_step(self, model, inputs):
        model.train()
        outputs = model(**inputs)
        loss = outputs[0]
        loss.backward()
        return loss

    def train(self, num_train_epochs=1):
        global_step = 0
        tr_loss = torch.tensor(0.0)
        logging_loss_scalar = 0.0
        self.model.zero_grad()
        for epoch in range(num_train_epochs):
            for step, inputs in enumerate(self.batches):
                tr_loss += self.training_step(self.model, inputs).item()
                self.optimizer.step()
                self.model.zero_grad()
                global_step += 1
                if global_step % self.logging_steps == 0:
                    tr_loss_scalar = tr_loss.item()
                    print({"loss": (tr_loss_scalar - logging_loss_scalar) / self.logging_steps})
                    logging_loss_scalar = tr_loss_scalar
        return global_step, tr_loss.item() / global_step


torch.manual_seed(0)
batches = [{"input_ids": torch.randint(0, 30, (4, 7)), "labels": torch.randint(0, 2, (4,))} for _ in range(6)]
print(Trainer(TinyClassifier(), batches).train())
