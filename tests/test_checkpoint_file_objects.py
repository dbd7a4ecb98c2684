"""torch.save / torch.load with file objects and bare tensors, as PyTorch programs use them."""

from __future__ import annotations

import io

import numpy as np
import pytest

import torchlean as tl
from torchlean.core.errors import CheckpointError


def test_state_dict_round_trips_through_a_buffer():
    model = tl.nn.Sequential(tl.nn.Linear(3, 4), tl.nn.ReLU(), tl.nn.Linear(4, 2))
    buffer = io.BytesIO()
    tl.save(model.state_dict(), buffer)
    buffer.seek(0)
    state = tl.load(buffer, weights_only=True)
    assert list(state) == list(model.state_dict())  # in the saved order, as torch's
    other = tl.nn.Sequential(tl.nn.Linear(3, 4), tl.nn.ReLU(), tl.nn.Linear(4, 2))
    other.load_state_dict(state)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[key], value)
    buffer.seek(0)
    tl.load(buffer, other)  # load(f, into) checks the structure as for a path


def test_bare_arrays_and_tensors_come_back_alone(tmp_path):
    data = np.sin(np.arange(12.0).reshape(3, 4))
    for obj in (data, tl.tensor(data), tl.tensor(data, requires_grad=True)):
        buffer = io.BytesIO()
        tl.save(obj, buffer)
        buffer.seek(0)
        back = tl.load(buffer, weights_only=False)
        assert isinstance(back, np.ndarray)
        np.testing.assert_array_equal(back, data)
    path = tmp_path / "data.pt"
    with open(path, "wb") as f:  # the pytorch/examples pattern: torch.save(x, open(p, "wb"))
        tl.save(data, f)
    np.testing.assert_array_equal(tl.load(str(path)), data)


def test_file_objects_are_checked():
    with pytest.raises(CheckpointError, match="binary"):
        tl.save({"w": np.ones(2)}, io.StringIO())
    with pytest.raises(CheckpointError, match="binary mode"):
        tl.load(io.StringIO("text"))
    buffer = io.BytesIO()
    tl.save({"w": np.ones(2)}, buffer)
    tampered = bytearray(buffer.getvalue())
    tampered[-1] ^= 0xFF  # one flipped bit in the data: the checksum catches it
    with pytest.raises(CheckpointError, match="BytesIO"):
        tl.load(io.BytesIO(bytes(tampered)))
    with pytest.raises(CheckpointError, match="binary file object"):
        tl.save({"w": np.ones(2)}, 3)
