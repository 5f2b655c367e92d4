# https://github.com/KupynOrest/DeblurGAN/pull/91
"""DeblurGAN (WGAN-GP): the PR added retain_graph=True to backward_D to silence
the error. The critic now scores fake_B.detach() and builds the gradient penalty
from .data copies, so each of the critic updates backwards a graph of its own and
the generator step runs D again on fake_B: the flag on loss_D is a leftover. The
retain_graph=True inside the penalty's autograd.grad (create_graph=True) belongs
to the double backward and stays."""
import torch
import torch.nn as nn
from torch import autograd


class DiscLossWGANGP:
    def __init__(self):
        self.LAMBDA = 10

    def get_g_loss(self, net, realA, fakeB):
        self.D_fake = net.forward(fakeB)
        return -self.D_fake.mean()

    def calc_gradient_penalty(self, netD, real_data, fake_data):
        alpha = torch.rand(1, 1, 1, 1).expand(real_data.size())
        interpolates = alpha * real_data + ((1 - alpha) * fake_data)
        interpolates.requires_grad_(True)
        disc_interpolates = netD.forward(interpolates)
        gradients = autograd.grad(
            outputs=disc_interpolates, inputs=interpolates, grad_outputs=torch.ones(disc_interpolates.size()),
            create_graph=True, retain_graph=True, only_inputs=True
        )[0]
        return ((gradients.view(gradients.size(0), -1).norm(2, dim=1) - 1) ** 2).mean() * self.LAMBDA

    def get_loss(self, net, realA, fakeB, realB):
        self.D_fake = net.forward(fakeB.detach()).mean()
        self.D_real = net.forward(realB).mean()
        self.loss_D = self.D_fake - self.D_real
        gradient_penalty = self.calc_gradient_penalty(net, realB.data, fakeB.data)
        return self.loss_D + gradient_penalty


class ConditionalGAN:
    def __init__(self, critic_updates=3, lambda_A=100):
        self.netG = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())
        self.netD = nn.Sequential(nn.Conv2d(3, 8, 4, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Flatten(),
                                  nn.Linear(8 * 4 * 4, 1))
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=1e-4, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=1e-4, betas=(0.5, 0.999))
        self.discLoss = DiscLossWGANGP()
        self.contentLoss = nn.L1Loss()
        self.criticUpdates = critic_updates
        self.lambda_A = lambda_A

    def set_input(self, blurred, sharp):
        self.input_A, self.input_B = blurred, sharp

    def forward(self):
        self.real_A = self.input_A
        self.fake_B = self.netG.forward(self.real_A)
        self.real_B = self.input_B

    def backward_D(self):
        self.loss_D = self.discLoss.get_loss(self.netD, self.real_A, self.fake_B, self.real_B)
        self.loss_D.backward()

    def backward_G(self):
        self.loss_G_GAN = self.discLoss.get_g_loss(self.netD, self.real_A, self.fake_B)
        self.loss_G_Content = self.contentLoss(self.fake_B, self.real_B) * self.lambda_A
        self.loss_G = self.loss_G_GAN + self.loss_G_Content
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()
        for iter_d in range(self.criticUpdates):
            self.optimizer_D.zero_grad()
            self.backward_D()
            self.optimizer_D.step()
        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()


torch.manual_seed(0)
model = ConditionalGAN()
sharp = torch.rand(6, 3, 8, 8) * 2 - 1
blurred = sharp + 0.1 * torch.randn_like(sharp)
for epoch in range(2):
    for start in range(0, 6, 3):
        model.set_input(blurred[start:start + 3], sharp[start:start + 3])
        model.optimize_parameters()
    print(f"epoch {epoch}: G_GAN {model.loss_G_GAN.item():.4f} G_L1 {model.loss_G_Content.item():.4f} "
          f"D {model.loss_D.item():.4f}")
