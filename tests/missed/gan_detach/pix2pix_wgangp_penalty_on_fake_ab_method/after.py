# https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/issues/439
"""A user's WGAN-GP variant of pix2pix from this thread ("Trying to backward through
the graph a second time, even I only call backward once"). The conditional
discriminator sees torch.cat((real_A, fake_B), 1); backward_D detaches fake_AB for
pred_fake but hands the undetached fake_AB to cal_gradient_penalty, so loss_D
backwards through the penalty into netG and frees the graph behind self.fake_B.
optimize_parameters runs forward() once and then several critic updates: the second
backward_D walks the freed generator graph again (as would backward_G). Class
methods, a critic loop inside optimize_parameters, a batch loop driving it."""
import torch
import torch.nn as nn


def cal_gradient_penalty(netD, real_data, fake_data, device, type='mixed', constant=1.0, lambda_gp=10.0):
    """Calculate the gradient penalty loss, used in WGAN-GP paper https://arxiv.org/abs/1704.00028"""
    if lambda_gp > 0.0:
        if type == 'real':   # either use real images, fake images, or a linear interpolation of two.
            interpolatesv = real_data
        elif type == 'fake':
            interpolatesv = fake_data
        elif type == 'mixed':
            alpha = torch.rand(real_data.shape[0], 1, device=device)
            alpha = alpha.expand(real_data.shape[0], real_data.nelement() // real_data.shape[0]).contiguous().view(*real_data.shape)
            interpolatesv = alpha * real_data + ((1 - alpha) * fake_data)
        else:
            raise NotImplementedError('{} not implemented'.format(type))
        interpolatesv.requires_grad_(True)
        disc_interpolates = netD(interpolatesv)
        gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolatesv,
                                        grad_outputs=torch.ones(disc_interpolates.size()).to(device),
                                        create_graph=True, retain_graph=True, only_inputs=True)
        gradients = gradients[0].view(real_data.size(0), -1)  # flat the data
        gradient_penalty = (((gradients + 1e-16).norm(2, dim=1) - constant) ** 2).mean() * lambda_gp        # added eps
        return gradient_penalty, gradients
    else:
        return 0.0, None


class GANLoss(nn.Module):
    """wgangp mode only."""

    def __call__(self, prediction, target_is_real):
        if target_is_real:
            loss = -prediction.mean()
        else:
            loss = prediction.mean()
        return loss


class Pix2PixModel:
    def __init__(self, device='cpu', n_critic=2, lambda_L1=100.0, L_GP=10.0):
        self.device = device
        self.n_critic = n_critic
        self.lambda_L1 = lambda_L1
        self.L_GP = L_GP
        self.netG = nn.Sequential(nn.Linear(6, 16), nn.ReLU(True), nn.Linear(16, 6), nn.Tanh())
        self.netD = nn.Sequential(nn.Linear(12, 16), nn.LeakyReLU(0.2, True), nn.Linear(16, 1))
        self.criterionGAN = GANLoss()
        self.criterionL1 = nn.L1Loss()
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=0.0002, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=0.0002, betas=(0.5, 0.999))

    def set_input(self, input):
        self.real_A = input['A'].to(self.device)
        self.real_B = input['B'].to(self.device)

    def forward(self):
        """Run forward pass; called by both functions <optimize_parameters> and <test>."""
        self.fake_B = self.netG(self.real_A)  # G(A)

    def set_requires_grad(self, nets, requires_grad=False):
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def backward_D(self):
        """Calculate GAN loss for the discriminator"""
        # Fake; stop backprop to the generator by detaching fake_B
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)  # we use conditional GANs; we need to feed both input and output to the discriminator
        pred_fake = self.netD(fake_AB.detach())
        self.loss_D_fake = self.criterionGAN(pred_fake, False)
        # Real
        real_AB = torch.cat((self.real_A, self.real_B), 1)
        pred_real = self.netD(real_AB)
        self.loss_D_real = self.criterionGAN(pred_real, True)
        # combine loss and calculate gradients
        # gradient penalty
        self.gradient_penalty, self.gradients = cal_gradient_penalty(self.netD, real_AB, fake_AB.detach(), self.device, lambda_gp=self.L_GP)
        self.loss_D = self.loss_D_fake + self.loss_D_real + self.gradient_penalty
        self.loss_D.backward()

    def backward_G(self):
        """Calculate GAN and L1 loss for the generator"""
        # First, G(A) should fake the discriminator
        fake_AB = torch.cat((self.real_A, self.fake_B), 1)
        pred_fake = self.netD(fake_AB)
        self.loss_G_GAN = self.criterionGAN(pred_fake, True)
        # Second, G(A) = B
        self.loss_G_L1 = self.criterionL1(self.fake_B, self.real_B) * self.lambda_L1
        # combine loss and calculate gradients
        self.loss_G = self.loss_G_GAN + self.loss_G_L1
        self.loss_G.backward()

    def optimize_parameters(self):
        self.forward()                   # compute fake images: G(A)
        # update D
        for _ in range(self.n_critic):
            self.set_requires_grad(self.netD, True)  # enable backprop for D
            self.optimizer_D.zero_grad()     # set D's gradients to zero
            self.backward_D()                # calculate gradients for D
            self.optimizer_D.step()          # update D's weights
        # update G
        self.set_requires_grad(self.netD, False)  # D requires no gradients when optimizing G
        self.optimizer_G.zero_grad()        # set G's gradients to zero
        self.backward_G()                   # calculate graidents for G
        self.optimizer_G.step()             # udpate G's weights


if __name__ == '__main__':
    torch.manual_seed(0)
    model = Pix2PixModel()
    dataset = [{'A': torch.randn(4, 6), 'B': torch.rand(4, 6) * 2 - 1} for _ in range(3)]
    for i, data in enumerate(dataset):
        model.set_input(data)
        model.optimize_parameters()
        print(i, model.loss_D.item(), model.loss_G.item())
