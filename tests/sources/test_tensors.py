"""Tensors as they come (torch; the tests skip without it): bfloat16 and float16 converted exactly,
autograd and devices handled, attention masks keeping padding out, the README's hook example."""

from __future__ import annotations

import numpy as np
import pytest

import spectra_cli as spectra
from spectra_cli.sources.in_memory import as_array, bfloat16_to_float32


def test_bfloat16_bits_to_float32_is_exact():
    x = np.array([1.0, -2.5, 3.140625, 2.0 ** -100, 2.0 ** 100, 0.0, -0.0, np.inf], dtype=np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # values with 8 significant bits: exact in bfloat16
    np.testing.assert_array_equal(bfloat16_to_float32(bits), x)


@pytest.fixture
def torch():
    """torch, imported by the tests that use it rather than by the module: each test worker collects every module,
    and torch takes ~1.7 s to import (a worker that runs none of these tests does not pay it)."""
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_low_precision_tensors_match_a_float64_reference(torch, name):
    dtype = getattr(torch, name)
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3000, 24, generator=g, dtype=torch.float64) * torch.arange(1, 25) ** -0.5).to(dtype)
    acc = spectra.Accumulator(d=24)
    acc.update(x)
    ref = spectra.Accumulator(d=24)
    ref.update(x.to(torch.float64).numpy())
    a = spectra.fit(acc, window="2:12").spectrum.eigenvalues
    b = spectra.fit(ref, window="2:12").spectrum.eigenvalues
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    assert as_array(x).dtype == (np.float32 if name == "bfloat16" else np.dtype(name))


def test_masked_update_equals_dropping_the_padded_rows(torch):
    g = torch.Generator().manual_seed(1)
    h = torch.randn(4, 7, 16, generator=g, requires_grad=True)  # hidden states of a batch, still in the graph
    mask = torch.tensor([[1, 1, 1, 0, 0, 0, 0], [1] * 7, [1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0]])
    acc = spectra.Accumulator(d=16)
    acc.update(h, mask=mask)
    kept = h.detach().numpy()[mask.numpy().astype(bool)]
    ref = spectra.Accumulator(d=16)
    ref.update(kept)
    assert acc.n == ref.n == int(mask.sum())
    np.testing.assert_allclose(spectra.fit(acc, window="2:8").spectrum.eigenvalues,
                               spectra.fit(ref, window="2:8").spectrum.eigenvalues, rtol=1e-13)
    with pytest.raises(spectra.InputError, match=r"mask has shape \(4, 6\); it must have X's leading shape \(4, 7\)"):
        acc.update(h, mask=mask[:, :6])
    with pytest.raises(spectra.InputError, match=r"mask has shape \(7, 4\)"):
        acc.update(h, mask=mask.T)  # the same size, transposed: refused, never read in the wrong order
    with pytest.raises(spectra.InputError, match="mask must hold booleans or 0/1"):
        acc.update(h, mask=mask * 0.5)
    flat = spectra.Accumulator(d=16)
    flat.update(h, mask=mask.reshape(-1))  # one value per row, flattened, is the same
    assert flat.n == ref.n


def test_a_tensor_on_a_device_that_cannot_move_is_one_clear_error():
    class Device:
        type = "cuda"

        def __str__(self) -> str:
            return "cuda:0"

    class GpuTensor:
        device = Device()

        def __dlpack__(self, *a, **k):  # pragma: no cover - never reached
            raise BufferError("on the device")

        def cpu(self):
            raise RuntimeError("no CUDA driver")

    with pytest.raises(TypeError, match=r"X is on cuda:0 and could not be moved to host memory \(no CUDA driver\)"):
        spectra.Accumulator(d=4).update(GpuTensor())


def test_the_readme_hook_example_runs_as_written(torch):
    """The notebook guide's forward hook, on a model shaped like a Hugging Face encoder (model.encoder.layer)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "notebooks.md").read_text()
    block = re.search(r"```python\n(import torch\nimport spectra_cli as spectra\n.*?)```", readme, re.S)
    assert block, "the notebook guide's hook example"
    code = block.group(1)

    class Layer(torch.nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(d, d)

        def forward(self, x, attention_mask=None):
            return (torch.tanh(self.lin(x)),)

    class Encoder(torch.nn.Module):
        def __init__(self, d: int, n: int) -> None:
            super().__init__()
            self.layer = torch.nn.ModuleList(Layer(d) for _ in range(n))

    class Model(torch.nn.Module):
        def __init__(self, d: int = 16) -> None:
            super().__init__()
            self.config = type("Config", (), {"hidden_size": d})()
            self.encoder = Encoder(d, 6)

        def forward(self, input_ids, attention_mask):
            x = torch.nn.functional.one_hot(input_ids, 16).float()
            for layer in self.encoder.layer:
                x = layer(x, attention_mask)[0]
            return x

    g = torch.Generator().manual_seed(2)
    loader = [{"input_ids": torch.randint(0, 16, (4, 9), generator=g),
               "attention_mask": (torch.arange(9) < torch.tensor([[9], [5], [7], [3]])).long()} for _ in range(30)]
    scope = {"model": Model(), "loader": loader}
    exec(compile(code.replace('acc.save("last_layer.moments.npz")', "pass")
                 .replace('spectra.fit("last_layer.moments.npz")', "None")
                 .replace('window="auto"', 'window="2:8"'), "notebooks.md", "exec"), scope)
    acc = scope["acc"]
    assert acc.n == sum(int(b["attention_mask"].sum()) for b in loader)  # padding never entered
