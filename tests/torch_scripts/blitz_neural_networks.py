# 60-minute blitz, "Neural Networks" (neural_networks_tutorial.py): LeNet on a 32x32 input.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):

    def __init__(self):
        super(Net, self).__init__()
        # 1 input image channel, 6 output channels, 5x5 square convolution kernel
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        # an affine operation: y = Wx + b
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5*5 from image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, input):
        c1 = F.relu(self.conv1(input))
        s2 = F.max_pool2d(c1, (2, 2))
        c3 = F.relu(self.conv2(s2))
        s4 = F.max_pool2d(c3, 2)
        s4 = torch.flatten(s4, 1)
        f5 = F.relu(self.fc1(s4))
        f6 = F.relu(self.fc2(f5))
        output = self.fc3(f6)
        return output


net = Net()
print(net)
# Deterministic weights from a NumPy seed (both frameworks start alike).
rng = np.random.default_rng(4)
net.load_state_dict({k: torch.from_numpy(
    rng.uniform(-1, 1, tuple(v.shape)).astype(np.float32) / np.sqrt(np.prod(v.shape[1:]) if len(v.shape) > 1 else v.shape[0]))
    for k, v in net.state_dict().items()})

params = list(net.parameters())
print(len(params))
print(params[0].size())  # conv1's .weight

input = torch.from_numpy(np.random.default_rng(5).standard_normal((1, 1, 32, 32)).astype(np.float32))
out = net(input)
print(out)

net.zero_grad()
out.backward(torch.randn(1, 10))

output = net(input)
target = torch.from_numpy(np.random.default_rng(6).standard_normal(10).astype(np.float32))
target = target.view(1, -1)  # make it the same shape as output
criterion = nn.MSELoss()

loss = criterion(output, target)
print(loss)

print(loss.grad_fn)  # MSELoss
print(loss.grad_fn.next_functions[0][0])  # Linear
print(loss.grad_fn.next_functions[0][0].next_functions[0][0])  # ReLU

net.zero_grad()     # zeroes the gradient buffers of all parameters

print('conv1.bias.grad before backward')
print(net.conv1.bias.grad)

loss.backward()

print('conv1.bias.grad after backward')
print(net.conv1.bias.grad)
bias_grad = net.conv1.bias.grad.clone()

learning_rate = 0.01
for f in net.parameters():
    f.data.sub_(f.grad.data * learning_rate)

import torch.optim as optim

# create your optimizer
optimizer = optim.SGD(net.parameters(), lr=0.01)

# in your training loop:
for step in range(5):
    optimizer.zero_grad()   # zero the gradient buffers
    output = net(input)
    loss = criterion(output, target)
    loss.backward()
    optimizer.step()    # Does the update
    print(step, loss.item())

print("CHECK nparams", len(params))
print("CHECK out", *out.detach().numpy().ravel().round(6).tolist())
print("CHECK bias_grad", *bias_grad.numpy().ravel().tolist())
print("CHECK loss", loss.item())
