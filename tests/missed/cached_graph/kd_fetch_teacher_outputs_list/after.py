# https://github.com/haitongli/knowledge-distillation-pytorch/issues/23
"""knowledge-distillation-pytorch runs the teacher once over the training loader
before the epochs (fetch_teacher_outputs) and reuses those outputs every epoch,
as the issue points out. The repository keeps .data.cpu().numpy() of them; here
the outputs are appended as they come, with the teacher's graph, so the second
epoch's first batch backwards through a graph the first epoch already freed."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def fetch_teacher_outputs(teacher_model, dataloader):
    teacher_model.eval()
    teacher_outputs = []
    for i, (data_batch, labels_batch) in enumerate(dataloader):
        teacher_outputs.append(teacher_model(data_batch).detach())
    return teacher_outputs


def loss_fn_kd(outputs, labels, teacher_outputs, alpha=0.9, T=4.0):
    kd = nn.KLDivLoss(reduction="batchmean")(F.log_softmax(outputs / T, dim=1), F.softmax(teacher_outputs / T, dim=1))
    return kd * (alpha * T * T) + F.cross_entropy(outputs, labels) * (1.0 - alpha)


def train_kd(model, teacher_outputs, optimizer, dataloader):
    model.train()
    for i, (train_batch, labels_batch) in enumerate(dataloader):
        output_batch = model(train_batch)
        loss = loss_fn_kd(output_batch, labels_batch, teacher_outputs[i])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


torch.manual_seed(0)
data = TensorDataset(torch.randn(16, 10), torch.randint(0, 4, (16,)))
train_dataloader = DataLoader(data, batch_size=4, shuffle=False)
teacher_model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))
model = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

teacher_outputs = fetch_teacher_outputs(teacher_model, train_dataloader)
for epoch in range(3):
    loss = train_kd(model, teacher_outputs, optimizer, train_dataloader)
    print(f"epoch {epoch}: loss {loss:.4f}")
