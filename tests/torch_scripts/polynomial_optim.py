# "Learning PyTorch with Examples": PyTorch: optim (polynomial_optim.py), with RMSprop.
import math

import numpy as np
import torch

x = torch.linspace(-math.pi, math.pi, 2000)
y = torch.sin(x)

p = torch.tensor([1, 2, 3])
xx = x.unsqueeze(-1).pow(p)

model = torch.nn.Sequential(
    torch.nn.Linear(3, 1),
    torch.nn.Flatten(0, 1)
)
rng = np.random.default_rng(3)
model.load_state_dict({k: torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(v.shape)).astype(np.float32))
                       for k, v in model.state_dict().items()})
loss_fn = torch.nn.MSELoss(reduction='sum')

learning_rate = 1e-3
optimizer = torch.optim.RMSprop(model.parameters(), lr=learning_rate)
for t in range(2000):
    y_pred = model(xx)

    loss = loss_fn(y_pred, y)
    if t % 100 == 99:
        print(t, loss.item())

    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

linear_layer = model[0]
print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
print("CHECK loss", loss.item())
print("CHECK bias", linear_layer.bias.item())
for i in range(3):
    print("CHECK w%d" % i, linear_layer.weight[:, i].item())
