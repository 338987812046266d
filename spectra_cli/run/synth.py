"""Seeded synthetic matrices with known spectra, streamed to ``.npy`` or Parquet.

- ``powerlaw``: rows ``z diag(sqrt(j^-alpha)) Q^T + offset * u`` with ``z ~ N(0, I)``, ``Q`` a
  random orthogonal matrix and ``u`` a random unit vector: covariance eigenvalues ``j^-alpha``.
- ``isotropic``: ``N(0, I)`` (an isotropic cloud).
- ``cone``: a narrow cone (the anisotropy of Ethayarajh 2019):
  ``residual * N(0, I) + strength * (0.15 + 0.85 U) u`` with ``U ~ Uniform(0, 1)`` per row and one random unit ``u``.
- ``random-features``: ``f(W^T x) / sqrt(d)`` with ``x ~ N(0, diag(j^-alpha))`` in ``R^v``, ``W`` a
  fixed ``v x d`` standard Gaussian matrix and ``f`` linear, quadratic (``y^2``), relu or tanh
  (Paquette, Xiao & Zhu 2026, Theorem 1: for ``y^p`` the spectrum is ``~ (log^(p-1)(j+1) / j)^alpha``).

``numpy.random.default_rng(seed)`` (and streams spawned from it) draw everything in a fixed
order, so the output does not depend on the block size. Files are written to a temporary name and renamed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from spectra_cli.errors import OptionError, describe_choices, param
from spectra_cli.options import memory_budget, parse_bytes, refuse_over_budget
from spectra_cli.sinks import write_matrix
from spectra_cli.validate import check_int, check_number

KINDS = ("powerlaw", "isotropic", "cone", "random-features")
ACTIVATIONS = ("linear", "quadratic", "relu", "tanh")
DTYPES = ("float32", "float64", "float16")
BLOCK = 8192


def _orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))  # Haar-distributed


def _unit(rng: np.random.Generator, d: int) -> np.ndarray:
    u = rng.standard_normal(d)
    return u / np.linalg.norm(u)


def generate(
    kind: str, *, n: int, d: int, seed: int = 0, alpha: float = 1.0, offset: float = 0.0,
    activation: str = "linear", input_dim: int | None = None, strength: float = 4.0, residual: float = 0.1,
    block: int = BLOCK,
) -> Iterator[np.ndarray]:
    """Yield float64 row blocks of the requested synthetic matrix."""
    if kind not in KINDS:
        raise OptionError(f"synth kind {describe_choices(kind, KINDS)}.")
    if n < 1 or d < 1:
        raise OptionError(f"-n {n} and -d {d} must both be at least 1.")
    if activation not in ACTIVATIONS:
        raise OptionError(f"{param('activation')} {describe_choices(activation, ACTIVATIONS)}.")
    if alpha <= 0 and kind in ("powerlaw", "random-features"):
        raise OptionError(f"{param('alpha', alpha)} must be positive.")
    rng = np.random.default_rng(seed)
    make: Callable[[int], np.ndarray]
    if kind == "powerlaw":
        root = np.arange(1, d + 1, dtype=np.float64) ** (-alpha / 2)
        A = root[:, None] * _orthogonal(rng, d).T
        mean = offset * _unit(rng, d)

        def make(b: int) -> np.ndarray:
            return rng.standard_normal((b, d)) @ A + mean
    elif kind == "isotropic":
        def make(b: int) -> np.ndarray:
            return rng.standard_normal((b, d))
    elif kind == "cone":
        u = _unit(rng, d)
        # Separate streams for residuals and coefficients keep the output independent of the block size.
        rng_res, rng_coef = rng.spawn(2)

        def make(b: int) -> np.ndarray:
            res = residual * rng_res.standard_normal((b, d))
            coeff = strength * (0.15 + 0.85 * rng_coef.random((b, 1)))
            return res + coeff * u
    else:
        v = input_dim or 4 * d
        root = np.arange(1, v + 1, dtype=np.float64) ** (-alpha / 2)
        W = rng.standard_normal((v, d))
        WA = root[:, None] * W
        activations: dict[str, Callable[[np.ndarray], np.ndarray]] = {
            "linear": lambda y: y, "quadratic": np.square, "relu": lambda y: np.maximum(y, 0.0), "tanh": np.tanh}
        f = activations[activation]
        scale = 1.0 / np.sqrt(d)

        def make(b: int) -> np.ndarray:
            return f(rng.standard_normal((b, v)) @ WA) * scale
    for lo in range(0, n, block):
        yield make(min(block, n - lo))


def write(path: str, blocks: Iterator[np.ndarray], *, n: int, d: int, dtype: str = "float32",
          column: str = "emb") -> None:
    """Stream blocks to ``.npy`` or ``.parquet`` atomically (temporary file, then rename)."""
    if dtype not in DTYPES:
        raise OptionError(f"{param('dtype')} {describe_choices(dtype, DTYPES)}.")
    write_matrix(path, blocks, n=n, d=d, dtype=dtype, column=column)


def synth(
    kind: str,
    *,
    out: str | os.PathLike[str],
    n: int = 10000,
    d: int = 256,
    seed: int = 0,
    alpha: float = 1.0,
    offset: float = 0.0,
    activation: str = "linear",
    input_dim: int | None = None,
    dtype: str = "float32",
    max_memory: int | str | None = None,
) -> dict[str, Any]:
    """Write a seeded synthetic ``n x d`` matrix with a known spectrum to ``out`` (``.npy`` or
    ``.parquet``, atomically) and return what was written (path, shape, dtype, kind, seed).

    ``kind``: ``powerlaw`` (Gaussian rows with covariance eigenvalues ``j^-alpha`` in a random rotation,
    plus ``offset`` sqrt(lambda_1) along a random unit vector), ``isotropic`` (standard normal rows),
    ``cone`` (a narrow cone around one direction) or ``random-features`` (``activation(x W) / sqrt(d)``
    of Gaussian inputs of width ``input_dim``, default 4d, with input spectrum ``j^-alpha``). ``max_memory``: bytes
    (or ``"8GB"``) its matrices may take (default half the physical memory), checked before any is made."""
    n, d = check_int("n", n, minimum=1), check_int("d", d, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    alpha, offset = check_number("alpha", alpha), check_number("offset", offset)
    if input_dim is not None:
        input_dim = check_int("input_dim", input_dim, minimum=1)
    path = os.fspath(out)
    if not path:
        raise OptionError(f"synth needs {param('out')} FILE (.npy or .parquet).")
    # the rotation (d x d, and QR's copies of it) or the random features' v x d weights, and a block of rows: all
    # float64, made before the first row is written
    v = (input_dim or 4 * d) if kind == "random-features" else 0
    need = 8.0 * (3.0 * d * d + float(v) * d + 2.0 * min(n, BLOCK) * max(d, v))
    refuse_over_budget(f"synth {kind}", f"d = {d}" + (f", input width {v}" if v else ""), need,
                       "the rotation or the random features' weights, and a block of rows, in float64",
                       memory_budget(parse_bytes(max_memory)))
    write(path, generate(kind, n=n, d=d, seed=seed, alpha=alpha, offset=offset, activation=activation,
                         input_dim=input_dim), n=n, d=d, dtype=dtype)
    return {"path": path, "n": n, "d": d, "dtype": dtype, "kind": kind, "seed": seed}
