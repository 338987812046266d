"""The public Python API: what ``import spectra_cli`` gives, which inputs each function takes
(ndarray, DLPack, __array__, path, Accumulator, moment file) with numbers equal to the CLI's
JSON, and the TypeErrors and messages a library caller gets."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spectra_cli as spectra
from tests.conftest import ROOT, powerlaw_matrix, reference_eigenvalues

X = powerlaw_matrix(3000, 48, 1.1, seed=5, offset=3.0)


class DLPackOnly:
    """An array known only through the DLPack protocol (numpy's own), like a torch or jax tensor."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class ArrayOnly:
    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


def _numbers(doc: dict) -> dict:
    out = {k: doc[k] for k in ("spectrum", "fit", "rank", "isotropy") if k in doc}
    out["spectrum"] = {k: v for k, v in out["spectrum"].items()}
    return out


def test_import_is_cheap_and_exports_the_api():
    code = ("import sys, spectra_cli; print(sorted(m for m in ('numpy', 'scipy', 'pyarrow', 'typer') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True, timeout=120)
    assert r.stdout.strip() == "[]"
    for name in ("fit", "spectrum", "isotropy", "whiten", "Accumulator", "Report", "SpectraError", "InputError",
                 "OptionError", "FitError", "SpectraWarning"):
        assert name in spectra.__all__ and getattr(spectra, name) is not None
    assert issubclass(spectra.InputError, spectra.SpectraError) and issubclass(spectra.InputError, ValueError)
    with pytest.raises(AttributeError):
        spectra.nothing_here  # noqa: B018




def test_accumulator_gives_the_numbers_of_the_rows(tmp_path):
    acc = spectra.Accumulator(d=X.shape[1])
    for lo in range(0, len(X), 700):
        acc.update(DLPackOnly(X[lo:lo + 700]))
    assert acc.n == len(X)
    direct = spectra.fit(X, window="3:20").to_dict()
    online = spectra.fit(acc, window="3:20").to_dict()
    np.testing.assert_allclose(online["spectrum"]["eigenvalues"], direct["spectrum"]["eigenvalues"], rtol=1e-12)
    assert online["fit"]["alpha"] == pytest.approx(direct["fit"]["alpha"], rel=1e-10)
    assert online["rank"]["rankme"] == pytest.approx(direct["rank"]["rankme"], rel=1e-10)
    assert online["isotropy"]["mean_cosine"] == pytest.approx(direct["isotropy"]["mean_cosine"], rel=1e-10)
    assert online["source"]["format"] == "moments" and online["source"]["rows_used"] == len(X)
    np.testing.assert_allclose(online["spectrum"]["eigenvalues"], reference_eigenvalues(X), rtol=1e-9)
    # The moment file of the scale-out issue: plain arrays, read back without pickle.
    path = acc.save(tmp_path / "m.npz")
    with np.load(path, allow_pickle=False) as z:
        assert str(z["format"]) == "spectra.moments/1"
    for data in (path, spectra.Accumulator.load(path)):
        again = spectra.spectrum(data).to_dict()
        np.testing.assert_array_equal(again["spectrum"]["eigenvalues"], online["spectrum"]["eigenvalues"])


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(1, 599), max_size=8, unique=True), order=st.randoms(use_true_random=False),
       weighted=st.booleans())
def test_any_split_merged_in_any_order_gives_the_moments_of_one_pass(cuts, order, weighted):
    rng = np.random.default_rng(len(cuts))
    Y = rng.standard_normal((600, 12)) * rng.uniform(0.1, 5, 12) + 100.0
    w = rng.uniform(0, 3, 600) if weighted else None
    one = spectra.Accumulator(12)
    one.update(Y, w)
    edges = [0, *sorted(cuts), 600]
    parts = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        p = spectra.Accumulator(12)
        p.update(Y[a:b], None if w is None else w[a:b])
        parts.append(p)
    order.shuffle(parts)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    A, B = one.moments, merged.moments
    assert A.n == B.n == 600
    np.testing.assert_allclose(B.second_moment_matrix(), A.second_moment_matrix(), rtol=1e-12, atol=1e-12 * np.abs(
        A.second_moment_matrix()).max())
    np.testing.assert_allclose(B.mean * B.scale, A.mean * A.scale, rtol=1e-12)
    assert merged.cosine.mean_cosine() == pytest.approx(one.cosine.mean_cosine(), rel=1e-12)


def test_accumulator_refuses_what_it_cannot_use(tmp_path):
    acc = spectra.Accumulator(4)
    with pytest.raises(spectra.InputError, match=r"^X has shape \(3, 5\); this accumulator takes rows of d = 4"):
        acc.update(np.zeros((3, 5)))
    with pytest.raises(TypeError, match="X must be an array"):
        acc.update([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(TypeError, match="got str"):
        acc.update("rows.npy")
    bad = np.ones((3, 4))
    bad[1, 2] = np.nan
    with pytest.raises(spectra.InputError, match=r"has 1 row\(s\) with NaN or inf entries \(first at row 1\)"):
        acc.update(bad)
    acc.update(np.ones((2, 4)))
    with pytest.raises(spectra.OptionError, match="fed without weights"):
        acc.update(np.ones((2, 4)), np.ones(2))
    with pytest.raises(spectra.OptionError, match="cannot merge moments that differ: d 4 vs 5"):
        acc.merge(spectra.Accumulator(5))
    with pytest.raises(spectra.OptionError, match=r"^partition_isotropy needs a second pass over the rows"):
        spectra.fit(acc, partition_isotropy=True)
    with pytest.raises(spectra.OptionError, match=r"^rows select\(s\) rows or weights"):
        spectra.fit(acc, rows="0:10")
    with pytest.raises(spectra.FitError, match=r"needs bootstrap groups that split every row"):
        spectra.fit(acc, ci=True)
    (tmp_path / "not.npz").write_bytes(b"PK\x03\x04 garbage")
    with pytest.raises(spectra.InputError):
        spectra.Accumulator.load(tmp_path / "not.npz")
    np.savez(tmp_path / "other.npz", format=np.array("someone.else/1"), meta=np.array("{}"), m2=np.eye(2))
    with pytest.raises(spectra.InputError, match="is not a spectra moment file"):
        spectra.Accumulator.load(tmp_path / "other.npz")


def test_bootstrap_from_an_accumulator_with_groups():
    acc = spectra.Accumulator(X.shape[1], groups=16)
    for lo in range(0, len(X), 100):
        acc.update(X[lo:lo + 100])
    ci = spectra.fit(acc, window="3:20", ci=True, ci_replicates=50).fit.ci
    assert ci.groups == 16 and ci.low < ci.high


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([[1.0, 2.0], [3.0, 4.0]], r"^data must be an array: .*got list \(wrap it as np.asarray"),
        (b"x.npy", r"^data must be an array: .*got bytes"),
        (3.5, r"^data must be a path \(str or os.PathLike\), a numpy array, .*got float"),
    ],
)
def test_what_is_not_an_array_is_a_type_error(data, message):
    with pytest.raises(TypeError, match=message):
        spectra.fit(data)


def test_a_ragged_object_is_a_type_error():
    class Ragged:
        def __array__(self, dtype=None, copy=None):
            return np.array([np.zeros(2), np.zeros(3)], dtype=object)

    with pytest.raises(TypeError, match="object array"):
        spectra.spectrum(Ragged())


def test_unknown_keyword_lists_the_valid_ones():
    with pytest.raises(TypeError, match=r"^fit\(\) got an unexpected keyword argument 'windw' \(did you mean "
                                        r"'window'\?\); valid keywords: eigenvalues, window, method, model"):
        spectra.fit(X, windw="3:20")
    with pytest.raises(TypeError, match=r"whiten\(\) got an unexpected keyword argument 'mehtod'"):
        spectra.whiten(X, mehtod="zca")


def test_library_messages_name_python_parameters():
    with pytest.raises(spectra.OptionError, match=r"^ddof=-1 must be 0 or a positive integer\.$"):
        spectra.fit(X, ddof=-1)
    with pytest.raises(spectra.OptionError, match=r"^precision 'float16' is not one of 'float64', 'float32'\.$"):
        spectra.spectrum(X, precision="float16")
    with pytest.raises(spectra.OptionError, match=r"^use one of weights, weight_column and logits, not several"):
        spectra.fit(X, weights=np.ones(len(X)), logits="z.npy")
    with pytest.raises(spectra.OptionError, match=r"^ddof=3000 must be less than the number of rows used \(3000\)"):
        spectra.fit(X, ddof=3000)


def test_warnings_point_at_the_callers_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spectra.fit(X[:200])  # n/d < 10: a finite-sampling warning
    assert caught and all(w.filename == __file__ for w in caught)
    assert issubclass(caught[0].category, spectra.SpectraWarning)


def test_weights_as_an_array_equal_weights_from_a_file(tmp_path):
    w = np.random.default_rng(1).uniform(0, 2, len(X))
    np.save(tmp_path / "w.npy", w)
    a = spectra.spectrum(X, weights=w).spectrum.eigenvalues
    b = spectra.spectrum(X, weights=str(tmp_path / "w.npy")).spectrum.eigenvalues
    np.testing.assert_array_equal(a, b)


def test_whiten_takes_and_returns_arrays():
    rep = spectra.whiten(DLPackOnly(X), method="zca")
    Y = rep.whitened
    assert isinstance(Y, np.ndarray) and Y.shape == X.shape
    np.testing.assert_allclose(np.cov(Y, rowvar=False), np.eye(X.shape[1]), atol=1e-8)
    assert rep.to_dict()["whitening"]["output"]["format"] == "array"
    again = spectra.whiten(X, transform=rep.whitening.transform).whitened
    np.testing.assert_allclose(again, Y, rtol=1e-12, atol=1e-12)


def test_states_pickle_small_for_workers_to_return():
    import pickle

    from spectra_cli.analysis.isotropy import CosineAccumulator
    from spectra_cli.stream.states import MomentsState

    d = 64
    state = MomentsState(d, groups=4, n_blocks=8)
    cos = CosineAccumulator(d)
    for _ in range(8):
        block = np.random.default_rng(0).standard_normal((5000, d))
        state.update(block, None)
        cos.update(block)
    size = len(pickle.dumps(state))
    assert size < 6 * 8 * d * d  # moments + 4 groups of d x d, no rows, no scratch buffer (5000 x 65)
    back = pickle.loads(pickle.dumps(state))
    np.testing.assert_array_equal(back.moments.m2, state.moments.m2)
    assert len(pickle.dumps(cos)) < 4 * 8 * d


def test_one_decomposition_per_spectrum_unless_rankme_is_asked_for(monkeypatch):
    import spectra_cli.run.matrix as api_module

    monkeypatch.setattr(api_module, "RANKME_AUTO_D", 16)  # a d x d route wider than the automatic limit
    Y = powerlaw_matrix(400, 24, 1.0, seed=2)
    rep = spectra.fit(Y)
    assert rep.rank.rankme is None and "eigen_uncentered_s" not in rep.timings
    assert rep.to_dict()["rank"]["rankme_source"].startswith("not computed: it would need a second 24 x 24")
    assert rep.timings["peak_bytes_estimate"] == 8.0 * 24 * 24 * 3
    asked = spectra.fit(Y, rankme=True)
    s = np.linalg.svd(Y, compute_uv=False)  # RankMe on the singular values of the uncentred rows
    p = s / s.sum() + 1e-7
    assert asked.rank.rankme == pytest.approx(float(np.exp(-(p * np.log(p)).sum())), rel=1e-9)
    assert "eigen_uncentered_s" in asked.timings
    assert spectra.fit(Y, centered=False).rank.rankme == pytest.approx(asked.rank.rankme, rel=1e-12)
    assert spectra.fit(Y[:12]).rank.rankme is not None  # the n x n route, 12 x 12: the second one is cheap
    wide = np.hstack([Y[:20], Y[:20]])  # the n x n route, 20 x 20: as wide as the limit allows
    assert spectra.fit(wide, window="1:5").rank.rankme is None


def test_the_effective_sample_size_of_weighted_rows_is_kish():
    w = np.random.default_rng(5).uniform(0.1, 3.0, len(X))
    doc = spectra.fit(X, weights=w, window="2:10").to_dict()
    assert doc["source"]["n_effective"] == pytest.approx(np.sum(w) ** 2 / np.sum(w**2), rel=1e-12)
    assert spectra.fit(X, window="2:10").to_dict()["source"]["n_effective"] is None


def test_the_spectrum_mirrors_its_json():
    import numpy as np

    import spectra_cli as spectra

    rep = spectra.fit(np.random.default_rng(0).standard_normal((400, 30)), window="2:10")
    doc = rep.to_dict()["spectrum"]
    for field in ("k90", "k95", "k99", "near_null", "usable_rank", "floor_definition", "top_k"):
        assert getattr(rep.spectrum, field) == doc[field], field
    with pytest.raises(AttributeError, match="this spectrum has no field 'k42'"):
        _ = rep.spectrum.k42
