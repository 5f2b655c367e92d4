# https://github.com/jessemelpolio/non-stationary_texture_syn/issues/15
"""The generator's perceptual and adversarial losses are backwarded first; when the style loss is
switched on, it is backwarded on its own afterwards, through the same generated image."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def gram(features):
    return features @ features.t() / features.numel()


class Trainer:
    def __init__(self, use_style):
        self.use_style = use_style
        self.generator = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8))
        self.critic = nn.Linear(8, 1)
        self.optimizer = torch.optim.Adam(self.generator.parameters(), lr=1e-3)

    def step(self, source, target):
        self.optimizer.zero_grad()
        fake = self.generator(source)
        perceptual_loss = F.l1_loss(fake, target)
        gan_loss = F.softplus(-self.critic(fake)).mean()
        (perceptual_loss + gan_loss).backward()
        if self.use_style:
            style_loss = F.mse_loss(gram(fake), gram(target))
            style_loss.backward()
        self.optimizer.step()


trainer = Trainer(use_style=True)
for step in range(3):
    trainer.step(torch.randn(5, 4), torch.randn(5, 8))
