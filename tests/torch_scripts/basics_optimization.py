# Learn the Basics, "Optimizing Model Parameters" (optimization_tutorial.py), synthetic data.
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

rng = np.random.default_rng(0)
centers = rng.standard_normal((10, 28 * 28)).astype(np.float32)
train_y = rng.integers(0, 10, 192)
test_y = rng.integers(0, 10, 128)
train_x = centers[train_y] + rng.standard_normal((192, 28 * 28)).astype(np.float32) * 2
test_x = centers[test_y] + rng.standard_normal((128, 28 * 28)).astype(np.float32) * 2
training_data = TensorDataset(torch.from_numpy(train_x.reshape(-1, 1, 28, 28)), torch.from_numpy(train_y))
test_data = TensorDataset(torch.from_numpy(test_x.reshape(-1, 1, 28, 28)), torch.from_numpy(test_y))

train_dataloader = DataLoader(training_data, batch_size=64)
test_dataloader = DataLoader(test_data, batch_size=64)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28*28, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 10),
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


model = NeuralNetwork()
wrng = np.random.default_rng(1)
model.load_state_dict({k: torch.from_numpy(
    (wrng.uniform(-1, 1, tuple(v.shape)) / np.sqrt(v.shape[-1])).astype(np.float32))
    for k, v in model.state_dict().items()})

learning_rate = 1e-3
batch_size = 64
epochs = 2

loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate * 10)


def train_loop(dataloader, model, loss_fn, optimizer):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        pred = model(X)
        loss = loss_fn(pred, y)

        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

        if batch % 2 == 0:
            loss, current = loss.item(), batch * batch_size + len(X)
            print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")


def test_loop(dataloader, model, loss_fn):
    model.eval()
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    test_loss, correct = 0, 0

    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()

    test_loss /= num_batches
    correct /= size
    print(f"Test Error: \n Accuracy: {(100*correct):>0.1f}%, Avg loss: {test_loss:>8f} \n")
    return test_loss, correct


for t in range(epochs):
    print(f"Epoch {t+1}\n-------------------------------")
    train_loop(train_dataloader, model, loss_fn, optimizer)
    test_loss, correct = test_loop(test_dataloader, model, loss_fn)
print("Done!")
print("CHECK test_loss", test_loss)
print("CHECK accuracy", correct)
