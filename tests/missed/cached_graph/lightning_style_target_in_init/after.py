# invented: the LightningModule form of the style tutorial's target, built in __init__ and used by every training_step
"""Texture synthesis as a LightningModule: the image being optimized is the only
trainable parameter (configure_optimizers), and the style target is the Gram
matrix of a feature network's output on the style image, computed in __init__.
The feature network's weights require grad, so self.target carries its graph and
the second training_step backwards through what the first one freed."""
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def gram(features):
    b, c, h, w = features.shape
    f = features.view(b, c, h * w)
    return f @ f.transpose(1, 2) / (c * h * w)


class LitTextureSynthesis(pl.LightningModule):
    def __init__(self, style_img):
        super().__init__()
        self.vgg = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.image = nn.Parameter(torch.rand_like(style_img))
        self.target = gram(self.vgg(style_img)).detach()

    def training_step(self, batch, batch_idx):
        return F.mse_loss(gram(self.vgg(self.image)), self.target) * 1e3

    def configure_optimizers(self):
        return torch.optim.Adam([self.image], lr=0.05)


torch.manual_seed(0)
model = LitTextureSynthesis(torch.rand(1, 3, 12, 12))
steps = TensorDataset(torch.zeros(4, 1))
trainer = pl.Trainer(
    accelerator="cpu",
    devices=1,
    max_steps=4,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
trainer.fit(model, DataLoader(steps, batch_size=1))
