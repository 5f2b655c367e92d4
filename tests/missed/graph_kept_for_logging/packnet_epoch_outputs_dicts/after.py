# https://github.com/TRI-ML/packnet-sfm/pull/51
"""Rebuilt from packnet-sfm's HorovodTrainer.train: each step's output dict is
appended to `outputs` so that training_epoch_end can average the loss, but the
dict holds the loss tensor itself, so every step's graph is kept until the
epoch ends (the upstream fix detached the loss before appending). Here the
appended dict is written out at the append, with the scalar loss in it."""
import torch
import torch.nn as nn


def average_key(batch_list, key):
    values = [batch[key] for batch in batch_list]
    return sum(values) / len(values)


class ModelWrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.depth_net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
        self.current_epoch = 0

    def training_step(self, batch, *args):
        depth = self.depth_net(batch["rgb"])
        loss = (depth - batch["depth"]).abs().mean()
        return {"loss": loss, "metrics": {"abs_rel": 0.0}}

    def training_epoch_end(self, output_batch):
        return {"avg_train-loss": average_key(output_batch, "loss")}


class HorovodTrainer:
    def train(self, dataloader, module, optimizer):
        module.train()
        outputs = []
        for i, batch in enumerate(dataloader):
            optimizer.zero_grad()
            output = module.training_step(batch, i)
            output["loss"].backward()
            optimizer.step()
            # Append output to list of outputs
            outputs.append({"loss": output["loss"].item(), "metrics": output["metrics"]})
        return module.training_epoch_end(outputs)


torch.manual_seed(0)
dataloader = [{"rgb": torch.randn(2, 3, 8, 8), "depth": torch.rand(2, 1, 8, 8)} for _ in range(5)]
module = ModelWrapper()
optimizer = torch.optim.Adam(module.parameters(), lr=2e-4)
print(HorovodTrainer().train(dataloader, module, optimizer))
