"""Convolution kernels and small layers in WeightWatcher's convention: the slices' ESD against numpy written
differently, the small-N fit against a brute force, and WeightWatcher 0.7.7's own numbers on two small checkpoints
(its ``analyze()`` run on these seeded weights, CPU, default options with ``mp_fit=True``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spectra_cli.analysis.density import SMALL_N_MIN_TAIL, density_fit, small_n_fit
from spectra_cli.analysis.weightwatcher import conv2d_esd, conv2d_labels, ww_conv_skip
from spectra_cli.run.batch import batch

safetensors_numpy = pytest.importorskip("safetensors.numpy")
pytest.importorskip("pandas")


def _heavy(rng, shape, df, scale):
    return rng.standard_t(df, size=shape) * scale


def _product(rng, n, m):
    k = max(n, m)
    return rng.standard_normal((n, k)) @ rng.standard_normal((k, m)) / np.sqrt(k * max(n, m))


def _cnn(seed=0):
    rng = np.random.default_rng(seed)
    sd = {"conv1.weight": _heavy(rng, (32, 3, 3, 3), 2.5, 0.2), "conv1.bias": rng.standard_normal(32) * 0.01,
          "conv2.weight": _heavy(rng, (64, 32, 3, 3), 3.0, 0.06), "conv2.bias": rng.standard_normal(64) * 0.01,
          "conv3.weight": _heavy(rng, (128, 64, 5, 5), 3.5, 0.03), "conv3.bias": rng.standard_normal(128) * 0.01}
    sd["fc1.weight"] = _product(rng, 256, 512) + _heavy(rng, (256, 512), 2.5, 0.01)
    sd["fc1.bias"] = rng.standard_normal(256) * 0.01
    sd["fc2.weight"] = _product(rng, 10, 256) * (1 + rng.standard_t(2.0, size=(10, 1)) ** 2)
    sd["fc2.bias"] = rng.standard_normal(10) * 0.01
    sd["head.weight"] = _heavy(rng, (10, 512), 2.2, 0.05)
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def _edge(seed=1):
    rng = np.random.default_rng(seed)
    sd = {"bn1.weight": 1 + 0.1 * rng.standard_normal(32), "bn1.bias": 0.1 * rng.standard_normal(32),
          "conv_down.weight": _heavy(rng, (32, 64, 3, 3), 3.0, 0.05),
          "conv_even.weight": _heavy(rng, (16, 64, 2, 2), 3.0, 0.05),
          "conv_1x1.weight": _heavy(rng, (64, 32, 1, 1), 3.0, 0.05),
          "conv1d.weight": _heavy(rng, (64, 32, 3), 3.0, 0.05), "emb.weight": _heavy(rng, (1000, 64), 3.0, 0.05),
          "gpt2_c_attn.weight": _heavy(rng, (64, 192), 3.0, 0.05), "tiny.weight": _heavy(rng, (12, 40), 3.0, 0.05),
          "tiny7.weight": _heavy(rng, (7, 40), 3.0, 0.05), "row.weight": _heavy(rng, (1, 40), 3.0, 0.05)}
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


#: WeightWatcher 0.7.7's analyze() on these weights: N, M, Q, num_evals, alpha, xmin, D, log_norm, stable_rank.
WW = {
    "conv1": (32, 3, 10.666666666666666, 27, 6.8117939426875109, 3.5961682381521749, 0.12977305078372914,
              1.7936986270518362, 9.9147204524872912),
    "conv2": (64, 32, 2, 288, 4.5335817720911571, 0.67825986516241765, 0.060077040353548217, 1.9873890155734464,
              25.850445227525697),
    "conv3": (128, 64, 2, 1600, 4.7166582012337468, 0.27144018255418334, 0.052910971474247281, 2.3457636464071512,
              70.443636759389449),
    "fc1": (512, 256, 2, 256, 13.030000745612622, 4.1125626369460502, 0.118715234124805, 2.4984132378701864,
            61.284338641344974),
    "fc2": (256, 10, 25.6, 10, 1.6792465097634999, 0.91072906969366085, 0.15550680312810217, 1.9400753615526294,
            1.9757678022187652),
    "head": (512, 10, 51.2, 10, 2.334265410686061, 3.9532932792477919, 0.1821810453560252, 1.9482102566570878,
             4.1035807816114929),
    "conv_1x1": (64, 32, 2, 32, 2.5126406771294603, 0.13958939608486731, 0.1461134484219197, 0.78333446228140935,
                 9.8661048891773024),
    "conv_down": (64, 32, 2, 288, 3.5813134540421485, 0.3615537791778039, 0.075325081401576954, 1.8228107869588641,
                  31.811327489584322),
    "conv_even": (16, 64, 0.25, 64, 3.3162563237652525, 0.19238560149975073, 0.13688243569936509,
                  1.1224856380931436, 24.37470378604808),
    "emb": (1000, 64, 15.625, 64, 5.4089870962537336, 8.7921376573987295, 0.053446364855264314, 2.6805939152722305,
            20.223651774201617),
    "gpt2_c_attn": (192, 64, 3, 64, 3.2424807628049757, 1.6723614929106114, 0.058774433060754139,
                    2.0068759350804277, 6.2179865996201649),
    "tiny": (40, 12, 3.3333333333333335, 12, 3.1559772350854782, 0.18809630228267732, 0.084705909337803975,
             0.44500208655104434, 5.2121446666870401),
}
COLUMNS = ("N", "M", "Q", "num_evals", "alpha", "xmin", "D", "log_norm", "stable_rank")


@pytest.mark.parametrize("build", [_cnn, _edge])
def test_weightwatchers_rows_for_conv_and_small_layers(tmp_path, build):
    folder = tmp_path / build.__name__
    folder.mkdir()
    safetensors_numpy.save_file(build(), folder / "model.safetensors")
    result = batch(str(folder), convention="weightwatcher")
    df = result.to_pandas()
    assert sorted(df["longname"]) == sorted(k for k in WW if k in {n.removesuffix(".weight") for n in build()})
    for _, row in df.iterrows():
        for col, want in zip(COLUMNS, WW[row["longname"]], strict=True):
            assert row[col] == pytest.approx(want, rel=1e-6), (row["longname"], col)
    kinds = {s["item"].partition("::")[2]: s["kind"] for s in result.skipped}
    if build is _edge:  # WeightWatcher reads no 3-D kernel, no 1-row matrix, no layer of 7 eigenvalues
        assert kinds["conv1d.weight"] == "tensor of 3+ dimensions"
        assert kinds["tiny7.weight"] == "WeightWatcher-skipped layer"
    else:
        conv = next(r for r in result.results if r["item"].endswith("conv3.weight"))
        assert conv["weightwatcher"]["columns"]["rf"] == 25 and conv["source"]["shape"] == [128, 64, 5, 5]
        assert "25 slices" in conv["spectrum"]["definition"] or "25 slices" in conv["source"]["layout"]


def test_spectras_own_convention_says_why_a_kernel_is_skipped(tmp_path):
    safetensors_numpy.save_file(_cnn(), tmp_path / "m.safetensors")
    result = batch(str(tmp_path / "m.safetensors"))
    why = {s["item"].partition("::")[2]: s["skipped"] for s in result.skipped}
    assert "--convention weightwatcher" in why["conv2.weight"] and "slices" in why["conv2.weight"]


def test_the_slices_esd_is_every_slices_squared_singular_values_halved():
    rng = np.random.default_rng(2)
    kernel = rng.standard_normal((12, 5, 3, 2))
    lam, n, m, rf, sv_min = conv2d_esd(kernel)
    # written differently: the slices as a stack (rf, out, in), each Gram's eigenvalues / 2
    stack = kernel.transpose(2, 3, 0, 1).reshape(6, 12, 5)
    each = [np.linalg.eigvalsh(s.T @ s) / 2 for s in stack]
    np.testing.assert_allclose(lam, np.sort(np.concatenate(each))[::-1], rtol=1e-10)
    assert (n, m, rf) == (12, 5, 6) and lam.size == 30
    assert sv_min == pytest.approx(max(math.sqrt(e.min()) for e in each), rel=1e-10)


@pytest.mark.parametrize(("shape", "labels"), [
    ((64, 32, 3, 3), (64, 32, 9)), ((32, 64, 3, 3), (64, 32, 9)),  # a wide slice: N, M swapped (odd rf)
    ((16, 64, 2, 2), (16, 64, 4)),  # ... swapped back by an even number of slices (WeightWatcher 0.7.7's Q = 0.25)
    ((3, 3, 32, 64), (64, 32, 9)),  # channels first (kh, kw, in, out)
])
def test_weightwatchers_labels_of_a_kernel(shape, labels):
    assert conv2d_labels(shape)[:3] == labels


def test_a_kernel_weightwatcher_would_skip_says_why():
    assert "at least 8" in ww_conv_skip((4, 1, 1, 1))
    assert "at most 15000" in ww_conv_skip((512, 512, 7, 7))
    assert ww_conv_skip((64, 32, 3, 3)) is None


def test_the_small_n_fit_is_the_brute_force_over_tails_of_eight():
    rng = np.random.default_rng(3)
    for _ in range(20):
        data = np.sort(np.exp(rng.standard_normal(rng.integers(8, 20))))
        fit = small_n_fit(data)
        best = None
        for i in range(data.size):  # every tail of at least 8, written out
            tail = data[i:]
            if tail.size < SMALL_N_MIN_TAIL:
                continue
            a = 1 + (tail.size - 1) / np.log(tail / tail[0]).sum()
            cdf = 1 - (tail / tail[0]) ** (1 - a)
            ks = np.abs(cdf - np.arange(tail.size) / tail.size).max()
            if best is None or ks < best[0]:
                best = (ks, a, tail[0], tail.size)
        assert (fit.ks_distance, fit.alpha, fit.xmin, fit.n_tail) == pytest.approx(best, rel=1e-12)
        assert fit.small_n
    big = np.exp(rng.standard_normal(40))
    assert not density_fit(big, small_n=True).small_n  # 20 or more: the usual fit


def test_a_convolutions_rank_loss_is_counted_slice_by_slice():
    from spectra_cli.analysis.weightwatcher import conv2d_rank_loss

    rng = np.random.default_rng(9)
    kernel = rng.standard_normal((64, 32, 3, 3))
    kernel[:, :, 0, 0] *= 1e-14  # (a slice far smaller than the others: full rank in its own right)
    assert conv2d_rank_loss(kernel) == 0
    kernel[:, 5, 1, 1] = 0.0  # (one slice loses a direction)
    assert conv2d_rank_loss(kernel) == 1


def test_alphapruning_alpha_reads_only_resolved_eigenvalues(tmp_path):
    rng = np.random.default_rng(10)
    w = (rng.standard_normal((64, 12)) @ rng.standard_normal((12, 48))).astype(np.float32)  # rank 12: 36 rounding
    safetensors_numpy.save_file({"low.weight": w}, tmp_path / "m.safetensors")
    (doc,) = batch(str(tmp_path / "m.safetensors"), convention="weightwatcher").results
    cols = doc["weightwatcher"]["columns"]
    resolved = np.array(doc["spectrum"]["eigenvalues"]) * doc["source"]["n_rows"]
    floor = doc["spectrum"]["numerical_floor"] * doc["source"]["n_rows"]
    assert cols["xmin_hill"] > floor and cols["xmin_hill"] >= np.sort(resolved[resolved > floor])[0]
