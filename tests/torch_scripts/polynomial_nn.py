# "Learning PyTorch with Examples": PyTorch: nn (polynomial_nn.py).
import math

import numpy as np
import torch

x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

# Prepare the input tensor (x, x^2, x^3).
p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)
# Deterministic start (a NumPy seed) in place of the default random init.
rng = np.random.default_rng(2)
model.load_state_dict({k: torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(v.shape)).astype(np.float32))
                       for k, v in model.state_dict().items()})

loss_fn = torch.nn.MSELoss(reduction='sum')

learning_rate = 1e-6
for t in range(2000):
    y_pred = model(xx)

    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())

    model.zero_grad()

    loss.backward()

    with torch.no_grad():
        for param in model.parameters():
            param -= learning_rate * param.grad

linear_layer = model[0]
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
print("CHECK loss", loss.item())
print("CHECK bias", linear_layer.bias.item())
for i in range(3):
    print("CHECK w%d" % i, linear_layer.weight[:, i].item())
