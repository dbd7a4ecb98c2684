# Forward/backward hooks as the PyTorch hooks tutorial and feature-extraction recipes use them
# (module pre/forward/full-backward hooks that observe and replace), then tensor hooks.
import torch
import torch.nn as nn
def det(model):
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.7 + i).reshape(p.shape) * 0.5)
    return model
model = det(nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)))
x = torch.cos(torch.arange(12, dtype=torch.float32)).reshape(3, 4).requires_grad_()
log = []
def pre(m, args):
    log.append(("pre", type(m).__name__, tuple(args[0].shape)))
    return (args[0] * 2,)
def fwd(m, args, out):
    log.append(("fwd", type(m).__name__, tuple(out.shape)))
    return out + 1
def bpre(m, gout):
    log.append(("bpre", type(m).__name__, round(gout[0].sum().item(), 4)))
def bwd(m, gin, gout):
    log.append(("bwd", type(m).__name__, None if gin[0] is None else round(gin[0].sum().item(), 4), round(gout[0].sum().item(), 4)))
    if isinstance(m, nn.ReLU):
        return (gin[0].clamp(min=0),)
h1 = model[0].register_forward_pre_hook(pre)
h2 = model[2].register_forward_hook(fwd)
h3 = model[1].register_full_backward_hook(bwd)
h4 = model[2].register_full_backward_pre_hook(bpre)
h5 = model[0].register_full_backward_hook(bwd)
y = model(x)
y.pow(2).sum().backward()
print("CHECK log", log)
print("CHECK xgrad", [round(v, 4) for v in x.grad.sum(0).tolist()])
print("CHECK wgrad", round(model[0].weight.grad.sum().item(), 4))
for h in (h1, h2, h3, h4, h5): h.remove()
log.clear()
model.zero_grad(); x.grad = None
model(x).pow(2).sum().backward()
print("CHECK after_remove", len(log), round(x.grad.sum().item(), 4))
feats = {}
def save(name):
    def hook(m, i, o): feats[name] = o.detach()
    return hook
for n, m in model.named_modules():
    if isinstance(m, nn.Linear): m.register_forward_hook(save(n))
model(x)
print("CHECK feats", sorted(feats), [tuple(v.shape) for k, v in sorted(feats.items())])
kw = nn.Linear(4, 4)
kw.register_forward_pre_hook(lambda m, a, k: ((a[0] * 0,), k), with_kwargs=True)
print("CHECK kw", kw(x).sub(kw.bias).abs().sum().item())
x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
w = torch.tensor([0.5, 0.25, -1.0], requires_grad=True)
seen = []
h = x.register_hook(lambda g: seen.append(g.clone()))
y = x * w
y.register_hook(lambda g: g * 2)
z = y.relu()
z.retain_grad()
z.register_hook(lambda g: seen.append(("z", g.clone())))
loss = (z * torch.tensor([1.0, 2.0, 3.0])).sum() + (y ** 2).sum()
loss.backward()
print("CHECK t_xgrad", x.grad.tolist(), w.grad.tolist(), z.grad.tolist())
print("CHECK t_seen", [s.tolist() if not isinstance(s, tuple) else (s[0], s[1].tolist()) for s in seen])
h.remove()
x.grad = None
(x * 3).sum().backward()
print("CHECK t_removed", x.grad.tolist(), len(seen))
a = torch.tensor([2.0], requires_grad=True)
b = a ** 3
b.register_hook(lambda g: g * 10)
g1, = torch.autograd.grad(b.sum(), a, create_graph=True)
g2, = torch.autograd.grad(g1.sum(), a)
print("CHECK second", g1.tolist(), g2.tolist())

m = nn.Linear(3, 2)
with torch.no_grad():
    m.weight.copy_(torch.tensor([[1., 2, 3], [4, 5, 6]])); m.bias.zero_()
m.weight.register_hook(lambda g: g.clamp(-1, 1))
m(x.detach()[None]).sum().backward()
print("CHECK clamp", m.weight.grad.tolist())
try:
    torch.tensor([1.0]).register_hook(lambda g: g)
except RuntimeError as e:
    print("CHECK err", "requires" in str(e) or "require" in str(e))
except Exception as e:
    print("CHECK err", "require" in str(e))
