"""A PyTorch tutorial-style training script, run once with ``torch`` and once with ``torchlean``
in its place: the same source, only the module passed as ``torch`` differs.

The script is what a PyTorch user writes: data as tensors (scikit-learn digits), a model class
subclassing ``nn.Module``, ``nn.CrossEntropyLoss()``, ``torch.optim.Adam`` / ``SGD``, the loop
``opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward(); opt.step()``, and evaluation
under ``with torch.no_grad():``. Work is bounded by steps (a few epochs over ~1,400 images), not
by time. Two checks: with each library's own initialisation both reach high test accuracy and
agree within a few points; started from the same weights (torch's, copied), the loss curves and
the final accuracy agree closely (float32 on both sides).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as real_torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import torchlean

DIGITS = load_digits()
X_TRAIN, X_TEST, Y_TRAIN, Y_TEST = train_test_split(
    (DIGITS.data / 16.0).astype(np.float32), DIGITS.target.astype(np.int64), test_size=0.2,
    random_state=0)


def tutorial(torch: ModuleType, optimizer: str = "adam", epochs: int = 4, batch_size: int = 64,
             init: Callable[[Any], None] | None = None, slice_labels: bool = True
             ) -> tuple[float, list[float], Any]:
    """The user's script; returns (test accuracy, per-step losses, model).

    ``slice_labels``: label batches are slices of the int64 label tensor (``y_train[i:j]``);
    otherwise each batch's labels become a tensor from the NumPy slice.
    """
    nn = torch.nn
    F = torch.nn.functional
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(64, 64)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            return self.fc2(F.relu(self.fc1(x)))

    model = Net()
    if init is not None:
        init(model)
    loss_fn = nn.CrossEntropyLoss()
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)

    x_train = torch.tensor(X_TRAIN, dtype=torch.float32)
    y_train = torch.tensor(Y_TRAIN)
    x_test, y_test = torch.tensor(X_TEST), torch.tensor(Y_TEST)

    losses = []
    model.train()
    for _ in range(epochs):
        for i in range(0, len(X_TRAIN), batch_size):
            xb = x_train[i:i + batch_size]
            yb = (y_train[i:i + batch_size] if slice_labels
                  else torch.tensor(Y_TRAIN[i:i + batch_size]))
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())

    model.eval()
    with torch.no_grad():
        predicted = model(x_test).argmax(dim=1)
        accuracy = (predicted == y_test).float().mean().item()
    return accuracy, losses, model


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_same_script_reaches_torchs_accuracy(optimizer: str) -> None:
    ours, our_losses, _ = tutorial(torchlean, optimizer, slice_labels=True)
    theirs, their_losses, _ = tutorial(real_torch, optimizer, slice_labels=True)
    assert theirs > 0.9  # the script itself is sound
    assert ours > 0.9
    assert abs(ours - theirs) <= 0.03
    assert our_losses[-1] < 0.25 * our_losses[0]


def test_from_the_same_weights_the_runs_agree() -> None:
    """torch's initial weights copied into torchlean's model: the same trajectory (float32)."""
    start = tutorial_init_state()
    theirs, their_losses, _ = tutorial(
        real_torch, "adam", slice_labels=True,
        init=lambda m: m.load_state_dict({k: real_torch.tensor(v) for k, v in start.items()}))
    ours, our_losses, _ = tutorial(torchlean, "adam", slice_labels=True,
                                   init=lambda m: m.load_state_dict(start))
    np.testing.assert_allclose(our_losses[:20], their_losses[:20], rtol=1e-3)
    np.testing.assert_allclose(our_losses, their_losses, rtol=0.05, atol=2e-3)
    assert abs(ours - theirs) <= 1.0 / len(Y_TEST) * 3  # at most 3 test images differ


def test_slicing_the_label_tensor() -> None:
    """The script as most tutorials write it: label batches sliced from the label tensor."""
    ours, _, _ = tutorial(torchlean, "adam", epochs=1)
    assert ours > 0.8


def tutorial_init_state() -> dict[str, np.ndarray]:
    """The state torch's Net starts from in ``tutorial`` (same seed, same layer order)."""
    real_torch.manual_seed(0)
    fc1, fc2 = real_torch.nn.Linear(64, 64), real_torch.nn.Linear(64, 10)
    return {f"{name}.{k}": v.detach().numpy().copy()
            for name, layer in (("fc1", fc1), ("fc2", fc2))
            for k, v in layer.state_dict().items()}
