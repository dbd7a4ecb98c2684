"""Train a small MLP on scikit-learn's 8x8 handwritten digits (the same run as `torchlean train`).

    pip install -e '.[examples]' && python examples/train_mlp_digits.py
    python examples/train_mlp_digits.py --epochs 3 --threads 2  # shorter, 2 BLAS threads

Public API only: tl.nn layers, tl.optim, tl.train.fit, tl.save.
"""

import example_options  # the scripts' shared command line (this folder)
import numpy as np
from sklearn.datasets import load_digits

import torchlean as tl
import torchlean.engine.ops_interface as F

args = example_options.parse(__doc__.splitlines()[0], epochs=30)  # --epochs, --threads

# Data: 1,797 images, pixels 0..16 scaled to [0, 1], flattened to 64 features, split 80/20.
digits = load_digits()
images = (digits.images / 16.0).astype(np.float32).reshape(-1, 64)
train, test = tl.Dataset(images, digits.target).split(0.8, seed=0)

# Model: 64 -> 256 -> 128 -> 10, initial weights from the seed.
tl.nn.manual_seed(0)
model = tl.nn.Sequential(
    tl.nn.Linear(64, 256), tl.nn.ReLU(),
    tl.nn.Linear(256, 128), tl.nn.ReLU(),
    tl.nn.Linear(128, 10),
)
optimizer = tl.optim.Adam(model.parameters(), lr=3e-3)
epochs = args.epochs


def report(m: tl.train.EpochMetrics) -> None:
    print(f"epoch {m.epoch:2d}  train loss {m.train_loss:.4f}  test loss {m.test_loss:.4f}  "
          f"test acc {m.test_accuracy:.4f}")
    # Cosine learning-rate decay over the run.
    optimizer.lr = 3e-3 * 0.5 * (1 + np.cos(np.pi * m.epoch / epochs))


# Integer labels go in as they are: fit passes them to F.cross_entropy as class indices.
history = tl.train.fit(model, F.cross_entropy, optimizer, train, epochs=epochs, batch_size=32,
                       test_data=test, seed=0, on_epoch=report)
print(f"final test accuracy: {history[-1].test_accuracy:.4f}")
tl.save("mlp_digits.safetensors", model)
