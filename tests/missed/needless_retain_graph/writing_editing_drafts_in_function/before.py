# https://github.com/EagleW/Writing-editing-Network/issues/3
"""Writing-editing network: train_batch writes num_exams drafts of an abstract,
each one a full forward pass of the model conditioned on the previous draft's
token ids (no graph), and steps the optimizer after every draft. Each draft's
graph is backwarded once, yet lossi.backward keeps retain_graph=True; the
authors agreed it can go."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, LENGTH, DIM = 20, 7, 16


class Config:
    lr = 0.01
    epochs = 2
    batch_size = 4
    num_exams = 3
    max_grad_norm = 10


class FbSeq2seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.encoder_title = nn.GRU(DIM, DIM, batch_first=True)
        self.encoder = nn.GRU(DIM, DIM, batch_first=True)
        self.decoder = nn.GRU(DIM, DIM, batch_first=True)
        self.out = nn.Linear(DIM, VOCAB)

    def forward(self, input_variable, prev_generated_seq, target_variable):
        _, title_hidden = self.encoder_title(self.embedding(input_variable))
        if prev_generated_seq is not None:
            _, draft_hidden = self.encoder(self.embedding(prev_generated_seq))
            title_hidden = title_hidden + draft_hidden
        decoder_outputs, _ = self.decoder(self.embedding(target_variable[:, :-1]), title_hidden)
        return self.out(decoder_outputs)


config = Config()
torch.manual_seed(0)
model = FbSeq2seq()
criterion = nn.CrossEntropyLoss(ignore_index=0)
optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)


def train_batch(input_variable, target_variable, model):
    loss_list = []
    prev_generated_seq = None
    target_variable_reshaped = target_variable[:, 1:].contiguous().view(-1)

    for i in range(config.num_exams):
        decoder_outputs = model(input_variable, prev_generated_seq, target_variable)
        decoder_outputs_reshaped = decoder_outputs.view(-1, VOCAB)
        lossi = criterion(decoder_outputs_reshaped, target_variable_reshaped)
        loss_list.append(lossi.item())
        if model.training:
            model.zero_grad()
            lossi.backward(retain_graph=True)
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
        prev_generated_seq = torch.topk(decoder_outputs, 1, dim=2)[1].squeeze(2)
    return loss_list


def train_epoches(dataset, model, n_epochs):
    train_loader = DataLoader(dataset, config.batch_size)
    for epoch in range(1, n_epochs + 1):
        model.train(True)
        training_loss_list = [0.0] * config.num_exams
        for batch_idx, (source, target) in enumerate(train_loader):
            loss_list = train_batch(source, target, model)
            for i in range(config.num_exams):
                training_loss_list[i] += loss_list[i]
        print(f"epoch {epoch}: " + " ".join(f"{loss:.3f}" for loss in training_loss_list))
    return model


titles = torch.randint(1, VOCAB, (8, 5))
abstracts = torch.randint(1, VOCAB, (8, LENGTH))
model = train_epoches(TensorDataset(titles, abstracts), model, config.epochs)
