# A custom nn.Module with register_buffer (the pattern of BatchNorm's running statistics and the
# tutorials' PositionalEncoding): running mean/variance updated under no_grad in training,
# used in eval, saved in state_dict but not in parameters(), moved by .double(); an evaluation
# loop under torch.no_grad(), a frozen sub-module (requires_grad_(False)) and a generator of
# parameters as torch's Module.parameters() is.
import io

import numpy as np
import torch
import torch.nn as nn


class RunningNorm(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * x.mean(0))
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * x.var(0))
                self.num_batches_tracked += 1
            mean, var = x.mean(0), x.var(0, unbiased=False)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RunningNorm(3)
        self.body = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        return self.body(self.norm(x))


rng = np.random.default_rng(0)
x = torch.from_numpy(rng.normal(2.0, 3.0, (256, 3)).astype(np.float32))
y = (x[:, :1] * 0.5 - x[:, 1:2] + 0.1 * x[:, 2:]).tanh()

model = Model()
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy(rng.uniform(-0.5, 0.5, tuple(p.shape)).astype(np.float32)))

params = model.parameters()
print("CHECK parameters_next", tuple(next(params).shape))
print("CHECK n_params", len(list(model.parameters())))
print("CHECK buffers", *[name for name, _ in model.named_buffers()])
print("CHECK state_keys", *model.state_dict().keys())

opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(20):
    for i in range(0, 256, 32):
        xb, yb = x[i:i + 32], y[i:i + 32]
        loss = ((model(xb) - yb) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("CHECK running_mean", *model.norm.running_mean.tolist())
print("CHECK running_var", *model.norm.running_var.tolist())
print("CHECK tracked", model.norm.num_batches_tracked.item(),
      str(model.norm.num_batches_tracked.dtype).replace("torch.", ""))

model.eval()
with torch.no_grad():
    eval_loss = ((model(x) - y) ** 2).mean()
    print("CHECK eval_loss", eval_loss.item(), eval_loss.requires_grad)

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
clone = Model()
clone.load_state_dict(torch.load(buffer))
clone.eval()
with torch.no_grad():
    print("CHECK clone_equal", torch.equal(clone(x), model(x)))

# freeze the normaliser and the first layer: only the last layer trains
model.train()
for p in model.body[0].parameters():
    p.requires_grad_(False)
frozen_before = model.body[0].weight.clone()
opt = torch.optim.SGD((p for p in model.parameters() if p.requires_grad), lr=0.05)
loss = ((model(x) - y) ** 2).mean()
opt.zero_grad()
loss.backward()
opt.step()
print("CHECK frozen_grad_none", model.body[0].weight.grad is None)
print("CHECK frozen_unchanged", torch.equal(frozen_before, model.body[0].weight))
print("CHECK trainable", sum(p.numel() for p in model.parameters() if p.requires_grad))

model.double()
print("CHECK double", *(str(t.dtype).replace("torch.", "") for t in (
    model.norm.running_mean, model.body[2].weight, model.norm.num_batches_tracked)))
