"""Teach a small decoder-only transformer to add two 2-digit numbers.

    pip install -e '.[examples]' && python examples/train_adder_transformer.py
    python examples/train_adder_transformer.py --epochs 3 --threads 2  # shorter, 2 BLAS threads

Each example is the token row  a1 a0 + b1 b0 = s0 s1 s2  (the sum written least significant digit
first, the order a carry is computed in). The model predicts every next token; only the three
answer positions are scored. Public API only: tl.nn layers, tl.optim, tl.train.fit.
"""

import example_options  # the scripts' shared command line (this folder)
import numpy as np

import torchlean as tl
import torchlean.engine.ops_interface as F

args = example_options.parse(__doc__.splitlines()[0], epochs=12)  # --epochs, --threads

PLUS, EQUALS, VOCAB = 10, 11, 12
IGNORE = -1  # a label of -1 one-hot encodes to a zero row: that position adds nothing to the loss

# Data: all 10,000 pairs (a, b), split 80/20, so no test sum was seen in training.
a, b = np.divmod(np.arange(10_000), 100)
s = a + b
rows = np.stack([a // 10, a % 10, np.full_like(a, PLUS), b // 10, b % 10,
                 np.full_like(a, EQUALS), s % 10, s // 10 % 10, s // 100], axis=1)
inputs, targets = rows[:, :-1], rows[:, 1:].copy()
targets[:, :5] = IGNORE  # score only the positions that predict the sum digits
train, test = tl.Dataset(inputs, targets).split(0.8, seed=0)
SEQ = inputs.shape[1]


class Block(tl.nn.Module):
    """Pre-LN transformer block: causal self-attention, then a GELU MLP, each residual."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = tl.nn.LayerNorm(d), tl.nn.LayerNorm(d)
        self.attn = tl.nn.MultiheadAttention(d, heads, causal=True)
        self.mlp = tl.nn.Sequential(tl.nn.Linear(d, 4 * d), tl.nn.GELU(), tl.nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(tl.nn.Module):
    def __init__(self, d: int = 64, heads: int = 4, layers: int = 3) -> None:
        super().__init__()
        self.tok = tl.nn.Embedding(VOCAB, d)
        self.pos = tl.nn.Embedding(SEQ, d)  # learned positions
        self.blocks = tl.nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln_f = tl.nn.LayerNorm(d)
        self.head = tl.nn.Linear(d, VOCAB)

    def forward(self, tokens):  # tokens: (B, T) token ids (as floats)
        positions = tokens * 0.0 + np.arange(tokens.shape[-1])  # 0..T-1 in every row
        x = self.tok(tokens) + self.pos(positions)
        return self.head(self.ln_f(self.blocks(x)))  # (B, T, VOCAB) logits


def exact_match(logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """An example counts only if all three sum digits are right."""
    right = (logits.argmax(axis=-1) == labels) | (labels == IGNORE)
    return {"accuracy": float(right.all(axis=1).mean())}


tl.nn.manual_seed(0)
model = TinyGPT()
lr, epochs = 2e-3, args.epochs
optimizer = tl.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)


def report(m: tl.train.EpochMetrics) -> None:
    print(f"epoch {m.epoch:2d}  train loss {m.train_loss:.4f}  test exact match "
          f"{m.test_accuracy:.4f}  ({m.seconds:.1f}s)")
    optimizer.lr = lr * 0.5 * (1 + np.cos(np.pi * m.epoch / epochs))  # cosine decay


history = tl.train.fit(model, F.cross_entropy, optimizer, train, epochs=epochs, batch_size=64,
                       test_data=test, seed=0, metrics=exact_match, on_epoch=report)

# Generate: feed the prompt, append the argmax digit, three times (greedy decoding).
model.eval()
for x, y in [(47, 85), (99, 99), (3, 8)]:
    row = [x // 10, x % 10, PLUS, y // 10, y % 10, EQUALS]
    for _ in range(3):
        padded = np.array([row + [0] * (SEQ - len(row))], dtype=np.float32)
        row.append(int(np.asarray(model(padded))[0, len(row) - 1].argmax()))
    print(f"{x} + {y} = {int(''.join(map(str, row[6:][::-1])))}")
print(f"final test exact match: {history[-1].test_accuracy:.4f}")
