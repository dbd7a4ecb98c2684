# beginner "Saving and Loading Models" (saving_loading_models.py) with the "What is a state_dict"
# recipe: TheModelClass, state_dict printing, saving/loading a state_dict, a whole checkpoint
# dictionary and a model of several parts; files replaced by io.BytesIO buffers.
import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# Define model
class TheModelClass(nn.Module):
    def __init__(self):
        super(TheModelClass, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


# Initialize model
model = TheModelClass()

# Initialize optimizer
optimizer = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)

# Print model's state_dict
print("Model's state_dict:")
for param_tensor in model.state_dict():
    print(param_tensor, "\t", model.state_dict()[param_tensor].size())
    print("CHECK size_" + param_tensor, *model.state_dict()[param_tensor].size())

# Print optimizer's state_dict
print("Optimizer's state_dict:")
for var_name in optimizer.state_dict():
    print(var_name, "\t", optimizer.state_dict()[var_name])
print("CHECK opt_lr", optimizer.state_dict()["param_groups"][0]["lr"])
print("CHECK opt_params", *optimizer.state_dict()["param_groups"][0]["params"])

# set the weights from a NumPy seed so both runs compute the same numbers
rng = np.random.default_rng(0)
with torch.no_grad():
    for p in model.parameters():
        p.copy_(torch.from_numpy(rng.uniform(-0.1, 0.1, tuple(p.shape)).astype(np.float32)))
x = torch.from_numpy(rng.standard_normal((4, 3, 32, 32)).astype(np.float32))
target = torch.tensor([1, 0, 4, 9])

# one training step, so the optimizer has state to save
loss = F.cross_entropy(model(x), target)
optimizer.zero_grad()
loss.backward()
optimizer.step()
print("CHECK opt_state_len", len(optimizer.state_dict()["state"]))

# Save/Load state_dict (Recommended)
PATH = io.BytesIO()
torch.save(model.state_dict(), PATH)
PATH.seek(0)

model2 = TheModelClass()
model2.load_state_dict(torch.load(PATH, weights_only=True))
model2.eval()
with torch.no_grad():
    out1 = model(x)
    out2 = model2(x)
print("CHECK same_after_load", torch.equal(out1, out2))
print("CHECK out_sum", out2.sum().item())

# Saving & Loading a General Checkpoint for Inference and/or Resuming Training
EPOCH = 5
buffer = io.BytesIO()
torch.save({
    'epoch': EPOCH,
    'model_state_dict': model.state_dict(),
    'optimizer_state_dict': optimizer.state_dict(),
    'loss': loss,
}, buffer)
buffer.seek(0)

model3 = TheModelClass()
optimizer3 = optim.SGD(model3.parameters(), lr=0.001, momentum=0.9)
checkpoint = torch.load(buffer, weights_only=True)
model3.load_state_dict(checkpoint['model_state_dict'])
optimizer3.load_state_dict(checkpoint['optimizer_state_dict'])
epoch = checkpoint['epoch']
loss3 = checkpoint['loss']
print("CHECK epoch", epoch)
print("CHECK loss", loss3.item())
model3.train()

# resuming: the next step of both optimizers is the same
for m, opt in ((model, optimizer), (model3, optimizer3)):
    opt.zero_grad()
    F.cross_entropy(m(x), target).backward()
    opt.step()
print("CHECK resumed_equal", all(torch.allclose(a, b) for a, b in
                                 zip(model.parameters(), model3.parameters())))
print("CHECK resumed_fc3", model3.fc3.weight.sum().item())

# Saving Multiple Models in One File
modelA = nn.Linear(4, 2)
modelB = nn.Linear(2, 1)
buffer = io.BytesIO()
torch.save({'modelA_state_dict': modelA.state_dict(),
            'modelB_state_dict': modelB.state_dict()}, buffer)
buffer.seek(0)
ckpt = torch.load(buffer, weights_only=True)
newA, newB = nn.Linear(4, 2), nn.Linear(2, 1)
newA.load_state_dict(ckpt['modelA_state_dict'])
newB.load_state_dict(ckpt['modelB_state_dict'])
print("CHECK multi_equal", torch.equal(newA.weight, modelA.weight), torch.equal(newB.bias, modelB.bias))

# Warmstarting Model Using Parameters from a Different Model: strict=False
class Bigger(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 2)
        self.extra = nn.Linear(2, 2)

    def forward(self, x):
        return self.extra(self.fc1(x))


netB = Bigger()
result = netB.load_state_dict({'fc1.weight': modelA.weight.detach().clone(),
                               'fc1.bias': modelA.bias.detach().clone()}, strict=False)
print("CHECK missing", *sorted(result.missing_keys))
print("CHECK unexpected", len(result.unexpected_keys))
print("CHECK warm_equal", torch.equal(netB.fc1.weight, modelA.weight))
