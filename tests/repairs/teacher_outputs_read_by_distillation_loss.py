# https://github.com/open-mmlab/mmrazor/pull/100
"""Online distillation: a teacher learns from the labels while a student learns from the teacher's
softened outputs, each with its own optimizer, both zeroed where the step starts. The teacher
sees the batch with noise of its own. The distillation loss reads the teacher's outputs without
detaching them, so its backward walks (and frees) the teacher's graph, which the teacher's own
loss backwards through afterwards."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

teacher = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 4))
student = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 4))
teacher_optimizer = torch.optim.SGD(teacher.parameters(), lr=0.1)
student_optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
inputs, labels = torch.randn(48, 10), torch.randint(0, 4, (48,))
temperature = 2.0
for step in range(6):
    x, y = inputs[step * 8 : (step + 1) * 8], labels[step * 8 : (step + 1) * 8]
    teacher_optimizer.zero_grad()
    student_optimizer.zero_grad()
    teacher_logits = teacher(x + 0.05 * torch.randn_like(x))
    student_logits = student(x)
    soft_targets = F.softmax(teacher_logits / temperature, dim=1)
    distillation = F.kl_div(F.log_softmax(student_logits / temperature, dim=1), soft_targets, reduction="batchmean")
    distillation.backward()
    student_optimizer.step()
    teacher_loss = F.cross_entropy(teacher_logits, y)
    teacher_loss.backward()
    teacher_optimizer.step()
print("CHECKSUM", sum(p.sum().item() for m in (teacher, student) for p in m.parameters()))
