"""Train a small conv net on the 8x8 digits (the same run as `torchlean train --model cnn`).

    pip install -e '.[examples]' && python examples/train_cnn_digits.py
    python examples/train_cnn_digits.py --epochs 3 --threads 2  # shorter, 2 BLAS threads

Public API only: tl.nn layers, tl.optim, tl.train.fit.
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits

import torchlean as tl
import torchlean.functional as F

# Command line: --epochs sets the run's length (the learning-rate schedule spans it, so a short
# run is a complete, smaller run); --threads pins BLAS threads, as `torchlean train` does, so a
# busy machine slows the run down instead of making its threads spin against other processes.
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=30, help="training epochs (default 30)")
parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
args = parser.parse_args()
try:
    from threadpoolctl import threadpool_limits  # comes with scikit-learn

    threadpool_limits(limits=args.threads, user_api="blas")
except ImportError:
    pass

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
