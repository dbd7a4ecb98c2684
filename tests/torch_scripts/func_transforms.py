# torch.func tutorials (per-sample gradients, Jacobians/Hessians, model ensembling), written
# against torch.func as the tutorials use it; deterministic weights (sin/cos) so values compare.
import copy
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, vmap, grad, jacrev, jacfwd, hessian, vjp, jvp, stack_module_state
def det(model, s=0.0):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.7 + s).reshape(p.shape) * 0.5)
    return model
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))
model = det(Net())
data = torch.cos(torch.arange(20, dtype=torch.float32)).reshape(5, 4)
targets = torch.tensor([0, 1, 2, 1, 0])
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}
def compute_loss(params, buffers, sample, target):
    batch = sample.unsqueeze(0)
    targets = target.unsqueeze(0)
    predictions = functional_call(model, (params, buffers), (batch,))
    return F.cross_entropy(predictions, targets)
ft_compute_grad = grad(compute_loss)
ft_compute_sample_grad = vmap(ft_compute_grad, in_dims=(None, None, 0, 0))
g = ft_compute_sample_grad(params, buffers, data, targets)
for k in g:
    print("CHECK", k, tuple(g[k].shape), round(g[k].sum().item(), 5), round(g[k][2].abs().sum().item(), 5))
x = torch.tensor([0.1, 0.5, -0.3, 0.9])
def f(x):
    return x.sin().sum() * x.cos()
print("CHECK jacrev", round(jacrev(f)(x).sum().item(), 5), round(jacfwd(f)(x)[1, 2].item(), 5))
print("CHECK hessian", round(hessian(lambda x: (x ** 3).sum() * x[0])(x).sum().item(), 4))
out, fn = vjp(f, x)
print("CHECK vjp", round(fn(torch.ones(4))[0].sum().item(), 5))
o, t = jvp(f, (x,), (torch.ones(4),))
print("CHECK jvp", round(t.sum().item(), 5), round(o.sum().item(), 5))
print("CHECK vmap_out", tuple(vmap(lambda a, b: a * b, in_dims=(0, None), out_dims=1)(data, x).shape))
print("CHECK vmap_mm", round(torch.vmap(torch.dot)(data, data).sum().item(), 4))
gx, aux = grad(lambda a: ((a ** 2).sum(), a.mean()), has_aux=True)(x)
print("CHECK aux", [round(v, 4) for v in gx.tolist()], round(aux.item(), 4))
g2 = grad(grad(lambda a: a.sin().sum() if a.dim() == 0 else a.sin()))(torch.tensor(0.3))
print("CHECK gradgrad", round(g2.item(), 5))
models = [det(Net(), s) for s in (0.0, 1.0, 2.0)]
ps, bs = stack_module_state(models)
base = copy.deepcopy(models[0]).to("meta")
def fmodel(params, buffers, x):
    return functional_call(base, (params, buffers), (x,))
pred = vmap(fmodel, in_dims=(0, 0, None))(ps, bs, data)
print("CHECK ensemble", tuple(pred.shape), round(pred.sum().item(), 4), round(models[1](data).sum().item(), 4))
