# A training recipe: random_split with a generator, BatchNorm1d/LeakyReLU/Dropout, apply(kaiming
# init), a forward hook, RMSprop with momentum, OneCycleLR, label smoothing, gradient clipping,
# inference_mode, ReduceLROnPlateau and CosineAnnealingLR.
import torch
from torch import nn
from torch.utils.data import TensorDataset, DataLoader, random_split
torch.manual_seed(0)
X = torch.randn(200, 10); y = (X[:, 0] > 0).long()
ds = TensorDataset(X, y)
train, val = random_split(ds, [160, 40], generator=torch.Generator().manual_seed(1))
dl = DataLoader(train, batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.LeakyReLU(0.1), nn.Dropout(0.1), nn.Linear(32, 2))
def init(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight, nonlinearity="relu"); nn.init.zeros_(m.bias)
model.apply(init)
acts = {}
h = model[2].register_forward_hook(lambda m, i, o: acts.__setitem__("act", o.detach()))
opt = torch.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=50)
sched2 = None
lossf = nn.CrossEntropyLoss(label_smoothing=0.1)
step = 0
for epoch in range(10):
    model.train()
    for xb, yb in dl:
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step(); sched.step(); step += 1
        if step >= 50: break
    if step >= 50: break
h.remove()
model.eval()
with torch.inference_mode():
    xv = torch.stack([val[i][0] for i in range(len(val))])
    yv = torch.tensor([val[i][1] for i in range(len(val))])
    acc = (model(xv).argmax(dim=1) == yv).float().mean().item()
print("CHECK acc_ok", acc > 0.8)
print("CHECK act_shape", tuple(acts["act"].shape))
print("CHECK lr", round(sched.get_last_lr()[0], 6))
opt2 = torch.optim.Adagrad(model.parameters(), lr=0.1)
s3 = torch.optim.lr_scheduler.ReduceLROnPlateau(opt2, patience=1)
for i in range(4): s3.step(1.0)
print("CHECK plateau_lr", opt2.param_groups[0]["lr"])
s4 = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=3)
for i in range(5): opt2.step(); s4.step()
print("CHECK cos_lr", round(opt2.param_groups[0]["lr"], 6))
