# pytorch/examples dcgan/main.py (and the DCGAN tutorial), as written: weights_init by class
# name, Generator of ConvTranspose2d/BatchNorm2d/ReLU/Tanh, Discriminator of Conv2d/LeakyReLU/
# BatchNorm2d/Sigmoid, BCELoss, two Adam optimizers, real/fake labels with torch.full. Sizes are
# scaled down (16x16 images, ngf = ndf = 8) and the dataset is synthetic blobs in [-1, 1].
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data

torch.manual_seed(999)
nc, nz, ngf, ndf = 1, 16, 8, 8
batch_size = 32
device = torch.device("cpu")

rng = np.random.default_rng(0)
yy, xx = np.mgrid[0:16, 0:16]
centres = rng.uniform(4, 12, (256, 2))
images = np.exp(-((yy - centres[:, :1, None]) ** 2 + (xx - centres[:, 1:, None]) ** 2) / 8.0)
images = (images * 2 - 1).astype(np.float32)[:, None]
dataset = torch.utils.data.TensorDataset(torch.from_numpy(images))
dataloader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 4 x 4
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 8 x 8
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 16 x 16
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.main = nn.Sequential(
            # input is (nc) x 16 x 16
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 8 x 8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 4 x 4
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


netG = Generator().to(device)
netG.apply(weights_init)
print(netG)
netD = Discriminator().to(device)
netD.apply(weights_init)
print(netD)

criterion = nn.BCELoss()

fixed_noise = torch.randn(batch_size, nz, 1, 1, device=device)
real_label = 1
fake_label = 0

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=0.0002 * 5, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002 * 5, betas=(0.5, 0.999))

for epoch in range(4):
    for i, data in enumerate(dataloader, 0):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = data[0].to(device)
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label,
                           dtype=real_cpu.dtype, device=device)

        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        # train with fake
        noise = torch.randn(batch_size, nz, 1, 1, device=device)
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()

        print('[%d/%d][%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f / %.4f'
              % (epoch, 4, i, len(dataloader),
                 errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))

with torch.no_grad():
    fake = netG(fixed_noise).detach().cpu()
print("CHECK fake_shape", *fake.shape)
print("CHECK fake_range", bool(fake.min() >= -1), bool(fake.max() <= 1))
print("CHECK last_D_x", D_x)
print("CHECK last_errD", errD.item())
print("CHECK n_params_G", sum(p.numel() for p in netG.parameters()))
print("CHECK n_params_D", sum(p.numel() for p in netD.parameters()))
