# PyTorch tutorial "Spatial Transformer Networks Tutorial"
# (intermediate_source/spatial_transformer_tutorial.py): the localization network and fc_loc
# regressor initialised to the identity, F.affine_grid / F.grid_sample, Dropout2d, the
# legacy F.nll_loss(..., size_average=False), train/test loops and the visualisation's
# convert_image_np (torchvision.utils.make_grid replaced by a NumPy tiling). MNIST is replaced
# by synthetic 28x28 "digits": ten bars (five rows, five columns), shifted a little and
# noised.
from __future__ import print_function
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import numpy as np

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

rng = np.random.default_rng(0)
templates = np.zeros((10, 14, 14), np.float32)
for k in range(10):  # class k: a bar, horizontal (k < 5) or vertical, at its own offset
    if k < 5:
        templates[k, 2 * k + 2:2 * k + 4, 1:13] = 1.0
    else:
        templates[k, 1:13, 2 * (k - 5) + 2:2 * (k - 5) + 4] = 1.0


class SyntheticDigits(torch.utils.data.Dataset):
    def __init__(self, n):
        self.labels = rng.integers(0, 10, n)
        self.images = np.zeros((n, 1, 28, 28), np.float32)
        for i, y in enumerate(self.labels):
            r, c = rng.integers(6, 9, 2)
            self.images[i, 0, r:r + 14, c:c + 14] = templates[y]
        self.images += 0.1 * rng.standard_normal(self.images.shape).astype(np.float32)
        self.images = (self.images - 0.1307) / 0.3081

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.images[i]), int(self.labels[i])


torch.manual_seed(0)
# Training dataset
train_loader = torch.utils.data.DataLoader(SyntheticDigits(512), batch_size=64, shuffle=True)
# Test dataset
test_loader = torch.utils.data.DataLoader(SyntheticDigits(256), batch_size=64, shuffle=True)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

        # Spatial transformer localization-network
        self.localization = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=7),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True),
            nn.Conv2d(8, 10, kernel_size=5),
            nn.MaxPool2d(2, stride=2),
            nn.ReLU(True)
        )

        # Regressor for the 3 * 2 affine matrix
        self.fc_loc = nn.Sequential(
            nn.Linear(10 * 3 * 3, 32),
            nn.ReLU(True),
            nn.Linear(32, 3 * 2)
        )

        # Initialize the weights/bias with identity transformation
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    # Spatial transformer network forward function
    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 10 * 3 * 3)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)

        grid = F.affine_grid(theta, x.size(), align_corners=False)
        x = F.grid_sample(x, grid, align_corners=False)

        return x

    def forward(self, x):
        # transform the input
        x = self.stn(x)

        # Perform the usual forward pass
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


model = Net().to(device)

# The identity initialisation: the transformer starts by resampling the input unchanged.
x0 = next(iter(test_loader))[0][:4]
with torch.no_grad():
    same = model.stn(x0)
print("CHECK identity_stn", round(float((same - x0).abs().max()), 4))

optimizer = optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
losses = []


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)

        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % 4 == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))


def test():
    with torch.no_grad():
        model.eval()
        test_loss = 0
        correct = 0
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)

            # sum up batch loss
            test_loss += F.nll_loss(output, target, size_average=False).item()
            # get the index of the max log-probability
            pred = output.max(1, keepdim=True)[1]
            correct += pred.eq(target.view_as(pred)).sum().item()

        test_loss /= len(test_loader.dataset)
        print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'
              .format(test_loss, correct, len(test_loader.dataset),
                      100. * correct / len(test_loader.dataset)))
        return test_loss, correct / len(test_loader.dataset)


def convert_image_np(inp):
    """Convert a Tensor to numpy image."""
    inp = inp.numpy().transpose((1, 2, 0))
    mean = np.array([0.485, 0.456, 0.406])
    std = np.array([0.229, 0.224, 0.225])
    inp = std * inp + mean
    inp = np.clip(inp, 0, 1)
    return inp


def make_grid(batch):
    """torchvision.utils.make_grid's tiling, for single-channel images (repeated to RGB)."""
    b = batch.repeat(1, 3, 1, 1)
    return torch.cat([b[i] for i in range(b.size(0))], dim=2)


def visualize_stn():
    with torch.no_grad():
        # Get a batch of training data
        data = next(iter(test_loader))[0].to(device)

        input_tensor = data.cpu()
        transformed_input_tensor = model.stn(data).cpu()

        in_grid = convert_image_np(make_grid(input_tensor))
        out_grid = convert_image_np(make_grid(transformed_input_tensor))
        return in_grid, out_grid


for epoch in range(1, 4):
    train(epoch)
    test_loss, accuracy = test()

in_grid, out_grid = visualize_stn()
print("CHECK grid_shape", in_grid.shape, out_grid.shape)
print("CHECK first_loss", round(losses[0], 3))
print("CHECK last_loss", round(sum(losses[-4:]) / 4, 3))
print("CHECK test_loss", round(test_loss, 3))
print("CHECK accuracy", round(accuracy, 3))
