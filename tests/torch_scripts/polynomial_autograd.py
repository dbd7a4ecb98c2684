# "Learning PyTorch with Examples": PyTorch: Tensors and autograd (polynomial_autograd.py).
import math

import numpy as np
import torch

dtype = torch.float
device = "cpu"
torch.set_default_device(device)

# Create Tensors to hold input and outputs.
x = torch.linspace(-math.pi, math.pi, 2000, dtype=dtype)
y = torch.sin(x)

# Create random Tensors for weights; values from a NumPy seed so both frameworks start alike.
w0 = np.random.default_rng(1).standard_normal(4)
a = torch.randn((), dtype=dtype, requires_grad=True)
b = torch.randn((), dtype=dtype, requires_grad=True)
c = torch.randn((), dtype=dtype, requires_grad=True)
d = torch.randn((), dtype=dtype, requires_grad=True)
with torch.no_grad():
    for p, v in zip((a, b, c, d), w0):
        p.fill_(float(v))

learning_rate = 1e-6
for t in range(2000):
    y_pred = a + b * x + c * x ** 2 + d * x ** 3

    # Compute and print loss using operations on Tensors.
    loss = (y_pred - y).pow(2).sum()
    if t % 100 == 99:
        print(t, loss.item())

    loss.backward()

    # Manually update weights using gradient descent. Wrap in torch.no_grad()
    with torch.no_grad():
        a -= learning_rate * a.grad
        b -= learning_rate * b.grad
        c -= learning_rate * c.grad
        d -= learning_rate * d.grad

        # Manually zero the gradients after updating weights
        a.grad = None
        b.grad = None
        c.grad = None
        d.grad = None

print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
print("CHECK loss", loss.item())
for name, v in zip("abcd", (a, b, c, d)):
    print("CHECK", name, v.item())
