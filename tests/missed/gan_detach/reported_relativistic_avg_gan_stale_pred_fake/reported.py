# https://github.com/Zhaoyi-Yan/Shift-Net_pytorch/issues/34
"""Shift-Net's relativistic average GAN (`re_avg_gan`) before the commit that
answered this issue ("fix bug in re_avg_gan (#35)"). backward_D stores
self.pred_fake = self.netD(fake_AB.detach()) and self.pred_real, builds the
relativistic loss_D from both and backwards it; after optimizer_D.step(),
backward_G recomputes a local pred_fake = self.netD(fake_AB) but builds its
relativistic loss from the stale self.pred_fake of the discriminator step, so
loss_G.backward() re-enters that freed discriminator graph. The fake batch is
already detached where the discriminator scores it for its own loss: the .detach()
edit has nothing to add. The fix is for backward_G to use its own pred_fake (the
upstream commit added loss_D.backward(retain_graph=True) instead, which hands the
generator a stale, non-generator-connected score and, with optimizer_D.step() in
between, trips autograd's in-place check on current PyTorch)."""
import torch
import torch.nn as nn


class GANLoss(nn.Module):
    def __init__(self, gan_type='re_avg_gan', target_real_label=1.0, target_fake_label=0.0):
        super(GANLoss, self).__init__()
        self.register_buffer('real_label', torch.tensor(target_real_label))
        self.register_buffer('fake_label', torch.tensor(target_fake_label))
        if gan_type == 're_avg_gan':
            self.loss = nn.BCEWithLogitsLoss()
        else:
            raise ValueError("GAN type [%s] not recognized." % gan_type)

    def get_target_tensor(self, input, target_is_real):
        if target_is_real:
            target_tensor = self.real_label
        else:
            target_tensor = self.fake_label
        return target_tensor.expand_as(input)

    def __call__(self, input, target_is_real):
        target_tensor = self.get_target_tensor(input, target_is_real)
        return self.loss(input, target_tensor)


class ShiftNetModel:
    def __init__(self, lambda_A=100.0, gan_weight=0.2):
        self.lambda_A = lambda_A
        self.gan_weight = gan_weight
        self.netG = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(8, 3, 3, padding=1), nn.Tanh())
        self.netD = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Flatten(), nn.Linear(8 * 4 * 4, 1))
        self.criterionGAN = GANLoss(gan_type='re_avg_gan')
        self.criterionL1 = nn.L1Loss()
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=0.0002, betas=(0.5, 0.999))

    def set_input(self, input):
        self.real_A = input['A']
        self.real_B = input['B']

    def forward(self):
        self.fake_B = self.netG(self.real_A)

    def backward_D(self):
        fake_AB = self.fake_B
        # Real
        real_AB = self.real_B  # GroundTruth

        self.pred_fake = self.netD(fake_AB.detach())
        self.pred_real = self.netD(real_AB)

        self.loss_D = (self.criterionGAN(self.pred_real - torch.mean(self.pred_fake), True)
                       + self.criterionGAN(self.pred_fake - torch.mean(self.pred_real), False)) / 2.

        self.loss_D.backward()

    def backward_G(self):
        # First, G(A) should fake the discriminator
        fake_AB = self.fake_B
        pred_fake = self.netD(fake_AB)

        self.pred_real = self.netD(self.real_B)
        self.loss_G_GAN = (self.criterionGAN(self.pred_real - torch.mean(self.pred_fake), False)
                           + self.criterionGAN(self.pred_fake - torch.mean(self.pred_real), True)) / 2.

        self.loss_G_L1 = 0
        self.loss_G_L1 += self.criterionL1(self.fake_B, self.real_B) * self.lambda_A

        self.loss_G = self.loss_G_L1 + self.loss_G_GAN * self.gan_weight

        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()
        # for other type of GAN, ncritic = 1.
        self.ncritic = 1
        for i in range(self.ncritic):
            self.optimizer_D.zero_grad()
            self.backward_D()
            self.optimizer_D.step()

        self.optimizer_G.zero_grad()
        self.backward_G()
        self.optimizer_G.step()


if __name__ == '__main__':
    torch.manual_seed(0)
    model = ShiftNetModel()
    for i in range(3):
        model.set_input({'A': torch.randn(2, 3, 8, 8), 'B': torch.rand(2, 3, 8, 8) * 2 - 1})
        model.optimize_parameters()
        print(i, model.loss_D.item(), model.loss_G.item())
