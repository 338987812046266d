"""Convolution kernels in a batch, in WeightWatcher's convention: a 4-D kernel is its ``kh kw`` slices, each an ``out x
in`` matrix scaled by ``1/sqrt(2)``, and its spectrum the squared singular values of every slice together
(:func:`spectra_cli.analysis.weightwatcher.conv2d_esd`), fitted and measured as WeightWatcher 0.7.7's ``analyze()``
does. spectra's own convention analyses matrices: a kernel is skipped there, with the reason."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any

import numpy as np


def kernel_line(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The report of one convolution kernel (``file.safetensors::name``): its slices' spectrum in WeightWatcher's
    units (the eigenvalues of each slice's ``W^T W / 2``), every fit and rank of ``fit`` on it, and WeightWatcher's
    columns by its names (``N``, ``M`` as it labels them, ``rf``)."""
    from spectra_cli.analysis.weightwatcher import (
        WW_EVALS_THRESH,
        conv2d_esd,
        conv2d_labels,
        conv2d_rank_loss,
        conv2d_singular_values,
    )
    from spectra_cli.eigen.decomposition import Spectrum, floor_for
    from spectra_cli.errors import InputError
    from spectra_cli.options import ReadOptions
    from spectra_cli.run.matrix import report_of_spectrum
    from spectra_cli.sources import SourceInfo, fingerprint
    from spectra_cli.sources.safetensors import read_header, read_tensor

    started = time.perf_counter()
    path, _, tensor = name.partition("::")
    header, _ = read_header(path)
    if tensor not in header or len(header[tensor]["shape"]) != 4:
        raise InputError(f"{name} is not a 4-D convolution kernel.")
    kernel = read_tensor(path, tensor)
    if not np.all(np.isfinite(kernel)):
        raise InputError(f"{name} has NaN or inf entries; no spectrum can be computed from it.")
    each = conv2d_singular_values(kernel)  # (the ESD and the rank loss read the same SVDs)
    lam, n, m, rf, sv_min = conv2d_esd(kernel, each)
    _, _, _, last = conv2d_labels(kernel.shape)
    d = lam.size
    spec = Spectrum(eigenvalues=lam, n_samples=None, n_features=d,
                    definition=f"WeightWatcher's ESD of a convolution: the squared singular values of its {rf} "
                               f"slices ({'W[:, :, i, j]' if last else 'W[i, j]'}), each scaled by 1/sqrt(2), together",
                    precision="float64", numerical_floor=floor_for(lam, max(kernel.shape), 0, "float64"),
                    sampling_rank=d, structural_zeros=0,
                    method=f"LAPACK's SVD of each of the {rf} slices (numpy.linalg.svd), as WeightWatcher computes "
                           "them")
    opts = options["options"]
    opts = replace(opts, density_floor=WW_EVALS_THRESH)  # (these eigenvalues are WeightWatcher's own: factor 1)
    read = ReadOptions.create(centered=False, ddof=int(options.get("ddof", 1)), precision="float64")
    rows = math.prod(kernel.shape) // max(kernel.shape[1], 1)
    info = SourceInfo(path=name, format="safetensors", shape=tuple(int(x) for x in kernel.shape),
                      dtype=str(header[tensor]["dtype"]).lower(), n_rows=n, n_features=m,
                      layout=f"convolution kernel ({'out x in x kh x kw' if last else 'kh x kw x in x out'}): {rf} "
                             f"slices of {n} x {m} (WeightWatcher's labels)", key=tensor)
    overrides = {"sv_min": sv_min, "rank_loss": conv2d_rank_loss(kernel, each)}
    return report_of_spectrum(spec, opts, info=info, fingerprint=fingerprint(name), rows_used=rows, read=read,
                              n_rows=n, factor=1.0, labels=(n, m, rf), overrides=overrides, started=started).to_dict()
