# 60-minute blitz, "A Gentle Introduction to torch.autograd" (autograd_tutorial.py); the
# resnet18 example replaced by a small convolutional net of the same role.
import numpy as np
import torch
from torch import nn, optim

model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 1000))
data = torch.rand(1, 3, 8, 8)
labels = torch.rand(1, 1000)

prediction = model(data)  # forward pass
loss = (prediction - labels).sum()
loss.backward()  # backward pass

optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
optim.step()  # gradient descent

a = torch.tensor([2., 3.], requires_grad=True)
b = torch.tensor([6., 4.], requires_grad=True)
Q = 3*a**3 - b**2
external_grad = torch.tensor([1., 1.])
Q.backward(gradient=external_grad)

# check if collected gradients are correct
print(9*a**2 == a.grad)
print(-2*b == b.grad)

x = torch.rand(5, 5)
y = torch.rand(5, 5)
z = torch.rand((5, 5), requires_grad=True)

a2 = x + y
print(f"Does `a` require gradients?: {a2.requires_grad}")
b2 = x + z
print(f"Does `b` require gradients?: {b2.requires_grad}")

from torch import nn, optim

model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 1000))

# Freeze all the parameters in the network
for param in model.parameters():
    param.requires_grad = False

# Replace the classifier: only its parameters are unfrozen
model[3] = nn.Linear(4 * 6 * 6, 10)
optimizer = optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
out = model(data).sum()
out.backward()
frozen = [p.grad is None for p in list(model.parameters())[:2]]

print("CHECK a_grad", *a.grad.tolist())
print("CHECK b_grad", *b.grad.tolist())
print("CHECK requires", int(a2.requires_grad), int(b2.requires_grad))
print("CHECK frozen_no_grad", int(all(frozen)))
print("CHECK head_grad_shape", "x".join(str(s) for s in model[3].weight.grad.shape))
