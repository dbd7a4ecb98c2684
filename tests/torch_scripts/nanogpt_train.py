# A nanoGPT-style training loop: weight tying, apply(init), AdamW groups by p.dim(), the
# inspect.signature "fused" probe, GradScaler/autocast guards, scaled_dot_product_attention,
# torch.compile, clip_grad_norm_, cosine warmup schedule by hand, top-k sampling, checkpoints.
import inspect, math
from contextlib import nullcontext
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)
        self.n_head, self.n_embd = n_head, n_embd
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))
    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y2 = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        y2 = y2.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        y2 = F.softmax(y2, dim=-1) @ v
        y = y + 0 * y2
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)
class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=False)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd, bias=False)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"), nn.Linear(4 * n_embd, n_embd), nn.Dropout(0.0))
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))
class GPT(nn.Module):
    def __init__(self, vocab=11, block_size=8, n_layer=2, n_head=2, n_embd=16):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab, n_embd), wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(0.0), h=nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)]), ln_f=nn.LayerNorm(n_embd)))
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :]); loss = None
        return logits, loss
    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [{'params': decay_params, 'weight_decay': weight_decay}, {'params': nodecay_params, 'weight_decay': 0.0}]
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        print("CHECK groups", len(decay_params), len(nodecay_params), fused_available)
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
torch.manual_seed(1337)
model = GPT()
print("CHECK nparams", sum(p.numel() for p in model.parameters()))
device_type = 'cpu'
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=torch.bfloat16)
scaler = torch.cuda.amp.GradScaler(enabled=False)
opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), device_type)
data = np.array([i % 11 for i in range(400)], dtype=np.uint16)
def get_batch(i):
    ix = torch.randint(len(data) - 8, (4,))
    x = torch.stack([torch.from_numpy((data[j:j + 8]).astype(np.int64)) for j in ix.tolist()])
    y = torch.stack([torch.from_numpy((data[j + 1:j + 9]).astype(np.int64)) for j in ix.tolist()])
    return x, y
def get_lr(it, warmup=5, lr_decay_iters=60, max_lr=1e-2, min_lr=1e-3):
    if it < warmup: return max_lr * (it + 1) / (warmup + 1)
    if it > lr_decay_iters: return min_lr
    ratio = (it - warmup) / (lr_decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)
raw = torch.compile(model) if hasattr(torch, "compile") else model
first = None
for it in range(60):
    for g in opt.param_groups: g['lr'] = get_lr(it)
    X, Y = get_batch(it)
    with ctx:
        logits, loss = model(X, Y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt); scaler.update()
    opt.zero_grad(set_to_none=True)
    first = first if first is not None else loss.item()
print("CHECK loss_drop", first > 2.0, loss.item() < 1.0)
model.eval()
out = model.generate(torch.zeros((1, 1), dtype=torch.long), 20, temperature=0.8, top_k=5)
print("CHECK gen", tuple(out.shape), (out[0, 1:] == (out[0, :-1] + 1) % 11).float().mean().item() > 0.7)
ckpt = {'model': model.state_dict(), 'optimizer': opt.state_dict(), 'iter_num': 60, 'config': {'n_layer': 2}}
torch.save(ckpt, "ckpt.pt")
back = torch.load("ckpt.pt", map_location='cpu')
print("CHECK ckpt", back['iter_num'], sorted(back['config']), len(back['model']) == len(model.state_dict()))
model2 = GPT(); model2.load_state_dict(back['model'])
print("CHECK same", torch.allclose(model2(X, Y)[1], model(X, Y)[1]))
