# https://github.com/liyingyanUCAS/WoTE/issues/4
"""A planning agent's LightningModule overrides backward() and calls
loss.backward(retain_graph=True) on the summed trajectory and scoring losses.
Lightning calls backward once per training step and every step runs a fresh
forward, so the graph is never reused; the authors later dropped the flag."""
from typing import Dict, Tuple

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset


class TinyAgent(nn.Module):
    def __init__(self, feat_dim=10, num_poses=4, num_trajs=5):
        super().__init__()
        self.num_poses, self.num_trajs = num_poses, num_trajs
        self.backbone = nn.Sequential(nn.Linear(feat_dim, 32), nn.ReLU())
        self.traj_head = nn.Linear(32, num_trajs * num_poses * 3)
        self.score_head = nn.Linear(32, num_trajs)

    def forward(self, features: Dict[str, Tensor]) -> Dict[str, Tensor]:
        h = self.backbone(features["ego_status"])
        trajs = self.traj_head(h).view(-1, self.num_trajs, self.num_poses, 3)
        return {"trajectories": trajs, "scores": self.score_head(h)}

    def compute_loss(self, features, targets, prediction):
        distances = (prediction["trajectories"] - targets["trajectory"][:, None]).abs().mean(dim=(2, 3))
        best = distances.argmin(dim=1)
        traj_loss = distances.gather(1, best[:, None]).mean()
        score_loss = F.cross_entropy(prediction["scores"], best)
        return {"traj_loss": traj_loss, "score_loss": score_loss, "score_acc": (prediction["scores"].argmax(1) == best).float().mean()}

    def get_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class AgentLightningModule(pl.LightningModule):
    def __init__(self, agent):
        super().__init__()
        self.agent = agent

    def _step(self, batch: Tuple[Dict[str, Tensor], Dict[str, Tensor]], logging_prefix: str):
        features, targets = batch
        prediction = self.agent.forward(features)
        loss_dict = self.agent.compute_loss(features, targets, prediction)
        total_loss = 0.0
        for loss_key, loss_value in loss_dict.items():
            self.log(f"{logging_prefix}/{loss_key}", loss_value, on_step=True, on_epoch=True)
            if "acc" in loss_key:
                continue
            total_loss = total_loss + loss_value
        return total_loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def configure_optimizers(self):
        return self.agent.get_optimizers()

    def backward(self, loss):
        loss.backward()


class SceneDataset(Dataset):
    def __init__(self, n=16):
        self.ego = torch.randn(n, 10)
        self.traj = torch.randn(n, 4, 3)

    def __len__(self):
        return len(self.ego)

    def __getitem__(self, idx):
        return {"ego_status": self.ego[idx]}, {"trajectory": self.traj[idx]}


torch.manual_seed(0)
model = AgentLightningModule(TinyAgent())
trainer = pl.Trainer(
    accelerator="cpu",
    devices=1,
    max_steps=4,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(model, DataLoader(SceneDataset(), batch_size=4))
