"""Train a small conv net on the 8x8 digits (the same run as `torchlean train --model cnn`).

    pip install -e '.[examples]' && python examples/train_cnn_digits.py
    python examples/train_cnn_digits.py --epochs 3 --threads 2  # shorter, 2 BLAS threads

Public API only: tl.nn layers, tl.optim, tl.train.fit.
"""

import example_options  # the scripts' shared command line (this folder)
import numpy as np
from sklearn.datasets import load_digits

import torchlean as tl
import torchlean.engine.ops_interface as F

args = example_options.parse(__doc__.splitlines()[0], epochs=30)  # --epochs, --threads

# Data: images as (N, 1, 8, 8), pixels scaled to [0, 1], split 80/20 with a seeded shuffle.
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
train, test = tl.Dataset(images, digits.target).split(0.8, seed=0)

# Model: two conv / ReLU / 2x2 max-pool stages (8x8 -> 4x4 -> 2x2), then a linear classifier.
tl.nn.manual_seed(0)
model = tl.nn.Sequential(
    tl.nn.Conv2d(1, 16, 3, padding=1), tl.nn.ReLU(), tl.nn.MaxPool2d(2),
    tl.nn.Conv2d(16, 32, 3, padding=1), tl.nn.ReLU(), tl.nn.MaxPool2d(2),
    tl.nn.Flatten(),
    tl.nn.Linear(32 * 2 * 2, 10),
)
lr, epochs = 2e-3, args.epochs
optimizer = tl.optim.Adam(model.parameters(), lr=lr)


def report(m: tl.train.EpochMetrics) -> None:
    print(f"epoch {m.epoch:2d}  train loss {m.train_loss:.4f}  test acc {m.test_accuracy:.4f}  "
          f"({m.examples_per_second:,.0f} examples/s)")
    optimizer.lr = lr * 0.5 * (1 + np.cos(np.pi * m.epoch / epochs))  # cosine decay


# backend="compiled" traces the loss once per batch shape and reuses the graph.
history = tl.train.fit(model, F.cross_entropy, optimizer, train, epochs=epochs, batch_size=32,
                       test_data=test, backend="compiled", seed=0, on_epoch=report)
print(f"final test accuracy: {history[-1].test_accuracy:.4f}")
