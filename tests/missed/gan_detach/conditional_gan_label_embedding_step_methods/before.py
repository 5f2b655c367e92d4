# invented: the generator output reaches the discriminator as a parameter of a separate d_step method
"""A label-conditioned GAN in the style of PyTorch-GAN's cgan.py (generator and
discriminator both embed the class label), organised as a trainer with a d_step and
a g_step method. train_batch draws gen_imgs once and passes it to both: d_step scores
self.discriminator(gen_imgs, gen_labels) undetached and backwards d_loss, freeing the
generator graph; g_step, called after optimizer_D.step(), scores the same gen_imgs
and its backward re-enters that graph."""
import torch
import torch.nn as nn

n_classes = 3
latent_dim = 4
img_dim = 8


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_emb = nn.Embedding(n_classes, n_classes)
        self.model = nn.Sequential(nn.Linear(latent_dim + n_classes, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, img_dim), nn.Tanh())

    def forward(self, noise, labels):
        # Concatenate label embedding and image to produce input
        gen_input = torch.cat((self.label_emb(labels), noise), -1)
        return self.model(gen_input)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.label_embedding = nn.Embedding(n_classes, n_classes)
        self.model = nn.Sequential(nn.Linear(img_dim + n_classes, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 1))

    def forward(self, img, labels):
        # Concatenate label embedding and image to produce input
        d_in = torch.cat((img, self.label_embedding(labels)), -1)
        return self.model(d_in)


class CGANTrainer:
    def __init__(self):
        self.generator = Generator()
        self.discriminator = Discriminator()
        self.adversarial_loss = nn.MSELoss()
        self.optimizer_G = torch.optim.Adam(self.generator.parameters(), lr=0.0002, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(self.discriminator.parameters(), lr=0.0002, betas=(0.5, 0.999))

    def d_step(self, real_imgs, labels, gen_imgs, gen_labels, valid, fake):
        self.optimizer_D.zero_grad()

        # Loss for real images
        validity_real = self.discriminator(real_imgs, labels)
        d_real_loss = self.adversarial_loss(validity_real, valid)

        # Loss for fake images
        validity_fake = self.discriminator(gen_imgs, gen_labels)
        d_fake_loss = self.adversarial_loss(validity_fake, fake)

        # Total discriminator loss
        d_loss = (d_real_loss + d_fake_loss) / 2

        d_loss.backward()
        self.optimizer_D.step()
        return d_loss

    def g_step(self, gen_imgs, gen_labels, valid):
        self.optimizer_G.zero_grad()

        # Loss measures generator's ability to fool the discriminator
        validity = self.discriminator(gen_imgs, gen_labels)
        g_loss = self.adversarial_loss(validity, valid)

        g_loss.backward()
        self.optimizer_G.step()
        return g_loss

    def train_batch(self, real_imgs, labels):
        batch_size = real_imgs.shape[0]
        valid = torch.ones(batch_size, 1)
        fake = torch.zeros(batch_size, 1)

        # Sample noise and labels as generator input
        z = torch.randn(batch_size, latent_dim)
        gen_labels = torch.randint(0, n_classes, (batch_size,))

        # Generate a batch of images
        gen_imgs = self.generator(z, gen_labels)

        d_loss = self.d_step(real_imgs, labels, gen_imgs, gen_labels, valid, fake)
        g_loss = self.g_step(gen_imgs, gen_labels, valid)
        return d_loss, g_loss


if __name__ == "__main__":
    torch.manual_seed(0)
    trainer = CGANTrainer()
    for epoch in range(1):
        for i in range(3):
            imgs = torch.rand(4, img_dim) * 2 - 1
            labels = torch.randint(0, n_classes, (4,))
            d_loss, g_loss = trainer.train_batch(imgs, labels)
            print("[Epoch %d] [Batch %d] [D loss: %f] [G loss: %f]" % (epoch, i, d_loss.item(), g_loss.item()))
