# pytorch/examples vae/main.py: the fully connected VAE (784-400-20), reparameterize with
# randn_like, BCE + KLD loss, Adam, train/test loops and sampling. MNIST replaced by synthetic
# 28x28 images in [0, 1] (a class is a block pattern).
import numpy as np
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F

batch_size = 32
epochs = 3
log_interval = 10
torch.manual_seed(1)
device = torch.device("cpu")

rng = np.random.default_rng(0)
protos = rng.uniform(0, 1, (10, 1, 7, 7)).repeat(4, 2).repeat(4, 3)
labels = rng.integers(0, 10, 640)
images = np.clip(0.8 * protos[labels] + 0.2 * rng.uniform(0, 1, (640, 1, 28, 28)), 0, 1)
train_set = torch.utils.data.TensorDataset(torch.tensor(images[:512], dtype=torch.float32),
                                           torch.tensor(labels[:512]))
test_set = torch.utils.data.TensorDataset(torch.tensor(images[512:], dtype=torch.float32),
                                          torch.tensor(labels[512:]))
kwargs = {}
train_loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, shuffle=True, **kwargs)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=batch_size, shuffle=False, **kwargs)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = optim.Adam(model.parameters(), lr=1e-3)


# Reconstruction + KL divergence losses summed over all elements and batch
def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())

    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, (data, _) in enumerate(train_loader):
        data = data.to(device)
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
        if batch_idx % log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader),
                loss.item() / len(data)))

    print('====> Epoch: {} Average loss: {:.4f}'.format(
          epoch, train_loss / len(train_loader.dataset)))
    return train_loss / len(train_loader.dataset)


def test(epoch):
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (data, _) in enumerate(test_loader):
            data = data.to(device)
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                comparison = torch.cat([data[:n],
                                      recon_batch.view(batch_size, 1, 28, 28)[:n]])

    test_loss /= len(test_loader.dataset)
    print('====> Test set loss: {:.4f}'.format(test_loss))
    return test_loss, comparison


for epoch in range(1, epochs + 1):
    train_loss = train(epoch)
    test_loss, comparison = test(epoch)
    with torch.no_grad():
        sample = torch.randn(64, 20).to(device)
        sample = model.decode(sample).cpu()
print("CHECK train_loss", train_loss)
print("CHECK test_loss", test_loss)
print("CHECK comparison", *comparison.shape)
print("CHECK sample", *sample.view(64, 1, 28, 28).shape)
print("CHECK sample_mean", sample.mean().item())
