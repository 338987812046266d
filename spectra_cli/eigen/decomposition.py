"""Eigenvalues, floors and explained variance from moments or (when n < d) from rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from spectra_cli import threads
from spectra_cli.eigen import two_stage
from spectra_cli.eigen.tridiagonal import Reduction, eigvalsh_reduced
from spectra_cli.errors import InputError, Message, param
from spectra_cli.stream.moments import Moments
from spectra_cli.validate import product_dtype

FLOOR_DEFINITION = (
    "s * lambda_1 + (2 + sqrt(b)) * eps * lambda_1': eps the machine epsilon of the products' precision, b the most "
    "rows summed in one product, lambda_1 the largest eigenvalue of the matrix and lambda_1' that of what the "
    "products multiplied (the centred rows; lambda_1 itself when the product held the mean), s the symmetric "
    "eigensolver's part: d * eps64 in float64 (its worst case), sqrt(d) * eps32 where it runs in float32 (the float32 "
    "precision from d = 3,072; its rounding adds up as the products' does, as a random walk; measured 0.3-2.3 eps32 "
    "at d = 2,048-4,096). By Weyl's inequality each eigenvalue moves by at most the norm of the rounding error: about "
    "s * ||C|| from the eigensolver, and from the products (blocks are merged in float64) sqrt(b) * eps * ||C'|| from "
    "their sums and 2 * eps * ||C'|| from rounding each row to the precision. In float64, (d + sqrt(b)) * eps64 * "
    "lambda_1"
)

#: With the float32 precision, matrices of at least this order are decomposed in float32 (LAPACK ssyevd, through
#: SciPy: NumPy's eigvalsh decomposes float32 input in float64). There the tridiagonal reduction is bound by
#: memory bandwidth, and float32 halves it: on 2 cores, one thread, 0.37 s against 0.24 at d = 2,048, 1.73 against
#: 0.73 at 3,072, 4.83 against 2.48 at 4,096 (two threads: 2.51 against 1.28). At 2,048 the saving (0.08-0.13 s)
#: is less than importing scipy.linalg (0.27 s), which a single fit pays: a whole fit of 2,100 x 2,048 rows took
#: 1.32-1.38 s with it against 0.86-1.07 s without; at 1,024 it is 1.4x, at 384 little. Its largest error measured
#: 0.3-2.3 eps32 * lambda_1 at d = 2,048-4,096 (the floor counts
#: sqrt(d) * eps32 * lambda_1: 20-200x that).
FLOAT32_SOLVER_MIN_ORDER = 3072


def solver_precision(precision: str, order: int) -> str:
    """The precision of the symmetric eigensolver for a matrix of ``order`` rows under the products' ``precision``."""
    return "float32" if precision == "float32" and order >= FLOAT32_SOLVER_MIN_ORDER else "float64"


def solver_note(solver: str, routine: str = "") -> str:
    """What ``method`` adds for the eigensolver: its precision where float32, and LAPACK's two-stage routine where that
    ran (``routine``, from :func:`eigvalsh_routed`; nothing for float64's one-stage ``dsyevd``)."""
    two = routine.endswith("_2stage")
    if solver == "float32":
        return (f"; decomposed in float32 (LAPACK {routine or 'ssyevd'}"
                + (", the two-stage reduction, on one thread" if two else " via SciPy")
                + "; the floor counts its rounding, sqrt(d) * eps32 * lambda_1)")
    return f"; LAPACK {routine} (the two-stage reduction, on one thread)" if two else ""


# The largest eigenvalue must be a normal float64 (>= 2.2e-308): below it every eigenvalue is
# subnormal, with digits lost, or zero.
MIN_RESOLVED = float(np.finfo(np.float64).tiny)

# A drop by this factor between consecutive resolved eigenvalues marks near-null directions.
NEAR_NULL_GAP = 1e-4


#: The top-k route is taken automatically from this width up, when the fit windows end at or
#: below d / TOP_AUTO_FRACTION (measured with bench/bench_wide.py: at d = 4,096 the leading 256 took
#: 3.2 s against 7.6 s for eigvalsh; at d = 2,048 the leading 128 took longer than all 2,048).
TOP_AUTO_MIN_D = 4096
TOP_AUTO_FRACTION = 16
#: Past d / TOP_MAX_FRACTION leading eigenvalues, the full decomposition is the cheaper one.
TOP_MAX_FRACTION = 8
#: Nor is it taken automatically on a flat spectrum, one whose participation ratio exceeds
#: d * TOP_AUTO_MAX_PR: there Krylov methods converge slowly (bench/bench_top_shapes.py, d = 4,096,
#: K = 256: white noise, PR = 0.67 d, 1.58x eigvalsh's time; j^-0.2, 0.64 d, 1.26x; j^-0.5, 0.36 d,
#: 0.75x; j^-1, 0.01 d, 0.46x).
TOP_AUTO_MAX_PR = 0.5


def participation_ratio_of(m: Moments, *, centered: bool) -> float:
    """``(tr A)^2 / ||A||_F^2`` of the matrix a spectrum decomposes (``m2``, or the uncentred
    ``m2 + W mean mean^T``; any scaling of it alike), in O(d^2) with no d x d temporary."""
    tr = float(np.trace(m.m2))
    fro = float(np.einsum("ij,ij->", m.m2, m.m2))
    if not centered:
        mu, W = m.mean, m.weight_sum
        mm = float(mu @ mu)
        tr += W * mm
        fro += 2.0 * W * float(mu @ (m.m2 @ mu)) + W * W * mm * mm
    return tr * tr / fro if fro > 0 else 0.0


@dataclass(frozen=True, slots=True)
class TopK:
    """How the leading ``k`` of ``d`` eigenvalues were computed, and the exact sums over all d.

    Attributes:
        k: eigenvalues computed (the spectrum lists these only).
        trace: sum of all d eigenvalues, ``tr C`` (exact: the diagonal of the accumulated matrix).
        participation_ratio: ``(tr C)^2 / ||C||_F^2`` (exact: the sum of squares of all d eigenvalues
            is the squared Frobenius norm).
        dimension, block: of the block Krylov subspace; seed: of its start block.
        relative_bound: the largest error bound over the k values, relative to each value (or to the
            numerical floor for values below it); rounding error is the floor's, as on the full route.
        requested: why this route was taken.
    """

    k: int
    trace: float
    participation_ratio: float
    dimension: int
    block: int
    seed: int
    relative_bound: float
    requested: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "requested": self.requested,
            "method": "block Lanczos with full reorthogonalisation on the d x d matrix; Rayleigh-Ritz values "
                      "accepted when their residual bound min(|r|, |r|^2 / gap) is within 1e-12 of each value",
            "krylov_dimension": self.dimension,
            "block": self.block,
            "seed": self.seed,
            "relative_error_bound": self.relative_bound,
            "trace": self.trace,
            "exact_sums": "tr C (the sum of all d eigenvalues) and ||C||_F^2 (the sum of their squares) come from "
                          "the matrix itself, so explained variance, k90/k95/k99 (when reached within k), "
                          "the participation ratio and the stable rank are exact",
        }


@dataclass(frozen=True, slots=True)
class Spectrum:
    """A covariance (or second-moment) spectrum with its floors.

    Attributes:
        eigenvalues: descending; length ``min(n, d)`` on the Gram route, else ``d``.
        n_samples: rows used; n_features: d.
        definition: what matrix the eigenvalues belong to.
        precision: arithmetic of the products (``float64`` or ``float32``; ``float32`` decomposes in float32 too
            from :data:`FLOAT32_SOLVER_MIN_ORDER`, said in ``method``).
        numerical_floor: eigenvalues at or below it are not resolved from zero.
        sampling_rank: the largest rank the sample allows (n - 1 centred, n uncentred).
        structural_zeros: eigenvalues known to be zero without computing them (d - n).
        method: how the eigenvalues were obtained.
        top: set when only the leading ``top.k`` eigenvalues were computed (the top-k route).
        top_declined: why an asked-for top-k route was not taken (the full decomposition was made).
    """

    eigenvalues: np.ndarray
    n_samples: int | None
    n_features: int
    definition: str
    precision: str
    numerical_floor: float
    sampling_rank: int
    structural_zeros: int
    method: str
    top: TopK | None = None
    top_declined: str | None = None

    @property
    def numerical_rank(self) -> int:
        return int(np.count_nonzero(self.eigenvalues > self.numerical_floor))

    @property
    def near_null_count(self) -> int:
        """Resolved eigenvalues after the last drop by more than NEAR_NULL_GAP between
        consecutive ranks, when they are at most max(1, d/100) of them (LayerNorm's removed
        direction kept above zero by rounding)."""
        lam = self.eigenvalues[: min(self.numerical_rank, self.sampling_rank)]  # past it: sampling zeros
        if lam.size < 3:
            return 0
        gaps = np.flatnonzero(lam[1:] < lam[:-1] * NEAR_NULL_GAP)
        if not gaps.size:
            return 0
        count = int(lam.size - (gaps[-1] + 1))
        # Only a few isolated directions count (LayerNorm removes one); a large block below a
        # gap is a low-rank signal over small noise, which is data, not a numerical artefact.
        return count if count <= max(1, self.n_features // 100) else 0

    @property
    def usable_rank(self) -> int:
        """Ranks above the numerical floor, the sampling floor and any near-null gap."""
        return min(self.numerical_rank - self.near_null_count, self.sampling_rank)

    @property
    def below_floor(self) -> int:
        """Eigenvalues within the sampling rank at or below the numerical floor: null directions of the data
        (LayerNorm's, constant or dependent columns), not sampling zeros."""
        return max(min(self.sampling_rank, int(self.eigenvalues.size)) - self.numerical_rank, 0)

    @property
    def sampling_zeros(self) -> int:
        """Listed eigenvalues past the sampling rank: zero because n rows (n - 1 centred) span no more
        directions, whatever the data (not null directions of the data, such as LayerNorm's)."""
        return max(int(self.eigenvalues.size) - self.sampling_rank, 0)

    @property
    def n_over_d(self) -> float | None:
        return None if self.n_samples is None else self.n_samples / self.n_features

    def resolved(self) -> np.ndarray:
        """Eigenvalues with everything at or below the numerical floor set to 0."""
        lam = self.eigenvalues.copy()
        lam[lam <= self.numerical_floor] = 0.0
        return lam

    @property
    def total_variance(self) -> float:
        """The trace of the matrix: the sum of all its eigenvalues (on the top-k route, where only the leading
        ones are computed, the trace itself). One definition on both routes; it differs from the sum of the
        resolved eigenvalues by less than d times the numerical floor."""
        if self.top is not None:
            return max(self.top.trace, 0.0)
        return max(float(self.eigenvalues.sum()), 0.0)

    def explained_variance_ratio(self) -> np.ndarray:
        lam = self.resolved()
        total = self.total_variance
        return lam / total if total > 0 else np.zeros_like(lam)

    def k_for(self, fraction: float) -> int | None:
        """Smallest k whose cumulative explained variance reaches ``fraction`` (None on the top-k
        route when the leading k do not reach it: the rank is then only known to exceed k)."""
        cum = np.cumsum(self.explained_variance_ratio())
        if cum.size == 0 or cum[-1] <= 0:
            return None
        # Tolerate the last cumulative sum landing a rounding error below 1.
        hit = np.flatnonzero(cum >= fraction - 1e-12)
        if not hit.size and self.top is not None:
            return None
        return int(hit[0]) + 1 if hit.size else int(cum.size)

    def __getattr__(self, name: str) -> Any:
        """A field of the JSON (``rep.spectrum.k90`` is ``spectrum.k90`` of ``--json``) that is not an
        attribute of its own."""
        if name.startswith("_"):
            raise AttributeError(name)
        doc = self.to_dict()
        if name in doc:
            return doc[name]
        raise AttributeError(f"this spectrum has no field {name!r}; fields: {', '.join(doc)}")

    def to_dict(self) -> dict[str, Any]:
        ratio = self.explained_variance_ratio()
        return {
            "definition": self.definition,
            "method": self.method,
            "precision": self.precision,
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "n_over_d": self.n_over_d,
            "eigenvalues": self.eigenvalues.tolist(),
            "explained_variance_ratio": ratio.tolist(),
            "total_variance": self.total_variance,
            "k90": self.k_for(0.90),
            "k95": self.k_for(0.95),
            "k99": self.k_for(0.99),
            "numerical_floor": self.numerical_floor,
            "floor_definition": FLOOR_DEFINITION,
            "numerical_rank": self.numerical_rank,
            "near_null": self.near_null_count,
            "sampling_rank": self.sampling_rank,
            "usable_rank": self.usable_rank,
            "structural_zeros": self.structural_zeros,
            "top_k": self.top.to_dict() if self.top is not None else None,
        }


def _eps(precision: str) -> float:
    return float(np.finfo(product_dtype(precision)).eps)


#: Floating-point operations of a d x d eigvalsh, per d^3 (tridiagonal reduction and divide and conquer).
EIGVALSH_FLOPS = 4.0


def eigvalsh_checked(C: np.ndarray, what: str = "the covariance", *, uplo: Literal["L", "U"] = "L",
                     solver: str = "float64") -> np.ndarray:
    """``numpy.linalg.eigvalsh`` of a matrix that must be finite (see :func:`eigvalsh_routed`), the values alone."""
    return eigvalsh_routed(C, what, uplo=uplo, solver=solver)[0]


def eigvalsh_routed(C: np.ndarray, what: str = "the covariance", *, uplo: Literal["L", "U"] = "L",
                    solver: str = "float64") -> tuple[np.ndarray, str]:
    """``numpy.linalg.eigvalsh`` of a matrix that must be finite, and the LAPACK routine that ran (see
    :func:`eigvalsh_kept`)."""
    lam, routine, _ = eigvalsh_kept(C, what, uplo=uplo, solver=solver)
    return lam, routine


def eigvalsh_kept(C: np.ndarray, what: str = "the covariance", *, uplo: Literal["L", "U"] = "L",
                  solver: str = "float64", keep: bool = False) -> tuple[np.ndarray, str, Reduction | None]:
    """The eigenvalues (ascending) of a matrix that must be finite: a matrix whose entries overflowed
    float64 (moments of values near 1e154, or a moment file that says so) is an input error, never
    LAPACK's "did not converge". ``uplo``: the triangle that holds the matrix (``"U"``: the upper one).
    ``solver``: ``"float32"`` decomposes a float32 copy (:func:`solver_precision`); the values come back as float64.
    Also returns the LAPACK routine that ran: ``?syevd``, or from
    :func:`~spectra_cli.eigen.two_stage.min_order` on one thread ``?syevd_2stage``
    (:mod:`spectra_cli.eigen.two_stage`). ``keep``: where ``dsyevd`` would run, its two halves run instead and the
    tridiagonal reduction comes back too, for eigenvectors later (:mod:`spectra_cli.eigen.tridiagonal`: the same
    eigenvalues, bit for bit); else None."""
    if not np.all(np.isfinite(C)):
        raise InputError(f"{what} overflows float64 (entries beyond 1e308: values or a mean near 1e154); "
                         "rescale the data.")
    order = int(C.shape[0])
    two = order >= two_stage.min_order(solver)
    if solver == "float32" or two:
        # SciPy's OpenBLAS (these solvers' LAPACK) loaded before the thread limit below is set, so that it reaches it
        two_stage.available()
    try:
        with threads.blas(EIGVALSH_FLOPS * float(order) ** 3, threads.SMALL_EIGEN_FLOPS) as n_threads:
            single = None
            if solver == "float32":
                single = C.astype(np.float32)
                if not np.all(np.isfinite(single)):
                    raise InputError(f"{what} overflows float32 (entries beyond 3.4e38); use "
                                     f"{param('precision', 'float64')}.")
            if n_threads == 1 and two:
                if single is not None:
                    lam = two_stage.eigvalsh_two_stage(single, "float32", uplo=uplo, overwrite=True)
                    if lam is None:
                        single = C.astype(np.float32)  # (the failed call may have used it as its workspace)
                else:
                    lam = two_stage.eigvalsh_two_stage(C, "float64", uplo=uplo)
                if lam is not None:
                    return lam, ("s" if solver == "float32" else "d") + "syevd_2stage", None
            if single is not None:
                import scipy.linalg

                return scipy.linalg.eigh(single, lower=uplo == "L", eigvals_only=True, driver="evd",
                                         overwrite_a=True, check_finite=False).astype(np.float64), "ssyevd", None
            if keep and (reduced := eigvalsh_reduced(C, uplo)) is not None:
                return reduced[0], "dsyevd", reduced[1]
            return np.linalg.eigvalsh(C, UPLO=uplo), "dsyevd", None
    except np.linalg.LinAlgError as exc:  # pragma: no cover - finite symmetric input converges
        raise InputError(f"the eigendecomposition of {what} failed ({exc}).") from None


def floor_for(eigenvalues: np.ndarray, d: int, accumulated: int, precision: str,
              products_top: float | None = None, *, solver: str = "float64") -> float:
    """The numerical floor (see FLOOR_DEFINITION). ``products_top``: the largest eigenvalue (or an upper
    bound, such as the Frobenius norm) of what the products multiplied, when it is not the matrix's own
    (the uncentred second moment adds the mean's outer product in float64, after the products). ``solver``: the
    eigensolver's precision (:func:`solver_precision`)."""
    if not eigenvalues.size:
        return 0.0
    top = max(float(eigenvalues[0]), 0.0)
    eps = _eps(precision)
    root_b = float(np.sqrt(max(accumulated, 0)))
    if eps == _EPS64:
        return (d + root_b) * eps * top
    products = top if products_top is None else min(max(products_top, 0.0), top)
    solving = d * _EPS64 if solver == "float64" else float(np.sqrt(d)) * _eps(solver)
    return solving * top + (2.0 + root_b) * eps * products


_EPS64 = float(np.finfo(np.float64).eps)


def describe(centered: bool, ddof: int, weighted: bool) -> str:
    if not centered:
        return "uncentred second moment sum_i p_i x_i x_i^T (X^T X / n unweighted)"
    if weighted:
        return "weighted population covariance E^T (diag p - p p^T) E, p = w / sum w (no ddof)"
    return f"centred covariance (X - mean)^T (X - mean) / (n - {ddof})"


def _finish(lam_scaled: np.ndarray, factor: float) -> np.ndarray:
    lam = np.sort(lam_scaled)[::-1] * factor
    if not np.all(np.isfinite(lam)):
        raise InputError(
            "the covariance exceeds the float64 range (values above ~1e154 square past 1.8e308); "
            "rescale the input (e.g. divide by its largest magnitude)."
        )
    top = float(lam_scaled.max()) * factor if lam_scaled.size else 0.0
    if lam_scaled.size and float(lam_scaled.max()) > 0 and top < MIN_RESOLVED:
        raise InputError(
            f"the covariance is below the float64 range: its largest eigenvalue ({top:.3g}) is under "
            f"{MIN_RESOLVED:.3g}, where float64 loses digits (values near 1e-154 square below it); rescale the "
            "input (e.g. divide it by its largest magnitude)."
        )
    return lam


def spectrum_from_moments(
    m: Moments, *, centered: bool = True, ddof: int = 1, precision: str = "float64", top: int | None = None,
    top_reason: str = "",
) -> Spectrum:
    """Eigenvalues of the d x d matrix accumulated in ``m`` (LAPACK syevd via numpy).

    ``top``: only the leading ``top`` eigenvalues, by block Lanczos
    (:func:`spectra_cli.eigen.lanczos.top_eigenvalues`), with the trace and the Frobenius norm
    taken from the matrix; past ``d / TOP_MAX_FRACTION``, or when the subspace reaches its cap
    first, the full decomposition is made instead and ``method`` says so."""
    return spectrum_and_reduction(m, centered=centered, ddof=ddof, precision=precision, top=top,
                                  top_reason=top_reason)[0]


def spectrum_and_reduction(
    m: Moments, *, centered: bool = True, ddof: int = 1, precision: str = "float64", top: int | None = None,
    top_reason: str = "", keep: bool = False,
) -> tuple[Spectrum, Reduction | None]:
    """:func:`spectrum_from_moments`, and with ``keep`` the tridiagonal reduction its decomposition made, where it made
    one (:func:`eigvalsh_kept`: the float64 one-stage route), for eigenvectors later; else None."""
    C = m.second_moment_matrix(centered=centered, ddof=ddof)
    d = m.d
    factor = m.scale * m.scale
    method = "eigvalsh of the d x d matrix from streamed block moments (Chan et al. merge)"
    top_info = None
    declined: str | None = None
    if top is None and top_reason:  # the caller declined the top-k route, and says why
        method += f"; {top_reason}"
    if top is not None and top > d // TOP_MAX_FRACTION:
        declined = Message(f"{param('top', top)} asked, but past d/{TOP_MAX_FRACTION} = {d // TOP_MAX_FRACTION} "
                           "the full decomposition is cheaper")
        method += f"; {declined}"
        top = None
    lam_scaled = None
    reduction = None
    if top is not None:
        from spectra_cli.eigen.lanczos import top_eigenvalues

        found = top_eigenvalues(C, top)
        if found is None:
            declined = Message(f"{param('top', top)}: the Krylov subspace reached its cap before converging")
            method += f"; {declined}, so all d were computed"
        else:
            trace = float(np.trace(C))
            frob = float(np.vdot(C, C))
            lam_scaled = found.values
            top_info = TopK(k=top, trace=trace * factor, participation_ratio=trace * trace / frob if frob > 0 else 0.0,
                            dimension=found.dimension, block=found.block, seed=found.seed,
                            relative_bound=found.max_relative_bound,
                            requested=top_reason or Message(f"asked: {param('top', top)}"))
            method = (f"the leading {top} of {d} eigenvalues by block Lanczos (Krylov dimension {found.dimension}) "
                      "of the d x d matrix from streamed block moments (Chan et al. merge)")
    solver = "float64"
    if lam_scaled is None:
        solver = solver_precision(precision, d)
        lam_scaled, routine, reduction = eigvalsh_kept(C, solver=solver, keep=keep)
        method += solver_note(solver, routine)
    del C
    lam = _finish(lam_scaled, factor)
    products = None
    if not centered:  # the products multiplied the centred rows; the mean was added after, in float64
        denom = m.weight_sum
        products = float(np.sqrt(np.einsum("ij,ij->", m.m2, m.m2))) / denom * factor if denom > 0 else None
    floor = floor_for(lam, d, m.block_rows, precision, products, solver=solver)
    # centring costs up to about eps^2 |mean|^2 per entry even when every row is the mean (a constant matrix,
    # whose spectrum is that rounding alone)
    mean = m.mean
    centring = _EPS64 * _EPS64 * float(mean @ mean) * factor * d if centered and m.n else 0.0
    if lam.size and float(lam[-1]) < -10 * max(floor, centring, 1e-300):
        # rounding leaves a PSD sum of outer products within the floor of zero; far below it, moments lie
        raise InputError(f"the second moment has an eigenvalue of {float(lam[-1]):.3g}, far below minus the "
                         f"numerical floor ({floor:.3g}): it is not positive semi-definite, so these moments are "
                         "corrupt (a moment file written wrongly or by hand).")
    sampling = m.n_positive - 1 if centered else m.n_positive
    return Spectrum(
        eigenvalues=lam,
        n_samples=m.n,
        n_features=d,
        definition=describe(centered, ddof, m.weighted),
        precision=precision,
        numerical_floor=floor,
        sampling_rank=max(min(sampling, d), 0),
        structural_zeros=0,
        method=method,
        top=top_info,
        top_declined=declined,
    ), reduction


#: The float32 Gram route prepares its rows this many values at a time in float64 (32 MiB).
PREPARED_CHUNK = 1 << 22


def _prepared_rows(X: np.ndarray, w: np.ndarray | None, *, centered: bool,
                   dtype: np.dtype[Any] | type[np.floating[Any]] = np.float64) -> tuple[np.ndarray, float]:
    """The rows as the Gram route multiplies them: divided by a power of two near their largest magnitude
    (returned: exact to undo), centred on their (weighted) mean, each times ``sqrt(p_i)`` when weighted
    (``p = w / sum w``), all in float64, then held in ``dtype``: float32 (the float32 precision's products) is
    made a few rows at a time from their float64 values, without a float64 copy of them all."""
    X = np.asarray(X)
    # max |x| without a temporary |X| (exact in the input's own type, as is its conversion to float64)
    amax = max(float(np.max(X)), -float(np.min(X))) if X.size else 0.0
    scale = 2.0 ** np.ceil(np.log2(amax)) if amax > 0 else 1.0
    p = None if w is None else np.asarray(w, dtype=np.float64) / float(np.sum(w))
    if dtype == np.float64:
        # One float64 copy, then the same operations in place (no temporaries of the rows' size)
        A = np.array(X, dtype=np.float64, order="K")  # (the layout kept: the mean sums in the same order)
        A /= scale
        mean = A.mean(axis=0) if p is None else p @ A
        if centered:
            A -= mean
        if p is not None:
            A *= np.sqrt(p)[:, None]
        return A, float(scale)
    n, d = X.shape
    step = max(1, PREPARED_CHUNK // max(d, 1))
    total = np.zeros(d)
    for a in range(0, n, step):
        part = X[a:a + step].astype(np.float64)
        part /= scale
        total += part.sum(axis=0) if p is None else p[a:a + step] @ part
    mean = total / n if p is None else total
    out = np.empty((n, d), dtype=dtype)
    for a in range(0, n, step):
        part = X[a:a + step].astype(np.float64)
        part /= scale
        if centered:
            part -= mean
        if p is not None:
            part *= np.sqrt(p[a:a + step])[:, None]
        out[a:a + step] = part
    return out, float(scale)


def spectrum_from_rows(
    X: np.ndarray,
    w: np.ndarray | None = None,
    *,
    centered: bool = True,
    ddof: int = 1,
    precision: str = "float64",
) -> Spectrum:
    """The Gram route for n < d: eigenvalues of the n x n matrix, O(n^2 d).

    The non-zero eigenvalues of ``A^T A`` and ``A A^T`` coincide; the remaining
    ``d - n`` are structural zeros and are not listed.
    """
    n, d = X.shape
    A, scale = _prepared_rows(X, w, centered=centered, dtype=product_dtype(precision))
    if w is None:
        denom = float(n - ddof) if centered else float(n)
        npos = n
    else:
        denom = 1.0
        npos = int(np.count_nonzero(np.asarray(w, dtype=np.float64) / float(np.sum(w))))  # rows of positive p
    # n^2 d flops (a symmetric product): on the threads the policy gives it (outside, a library call's
    # BLAS runs on one thread: a 4,096 x 11,008 Gram took 3.6 s instead of 2.1 s on 2 cores)
    with threads.blas(float(n) * n * d):
        G = A @ A.T  # (in the products' precision: the rows were prepared in it)
    del A
    G = G.astype(np.float64, copy=False)
    G /= denom
    solver = solver_precision(precision, n)
    values, routine = eigvalsh_routed(G, solver=solver)
    lam = _finish(values, scale * scale)
    floor = floor_for(lam, d, d, precision, solver=solver)  # the Gram products sum d terms each
    sampling = npos - 1 if centered else npos
    return Spectrum(
        eigenvalues=lam,
        n_samples=n,
        n_features=d,
        definition=describe(centered, ddof, w is not None),
        precision=precision,
        numerical_floor=floor,
        sampling_rank=max(min(sampling, d), 0),
        structural_zeros=d - n,
        method="eigvalsh of the n x n Gram matrix (n < d)" + solver_note(solver, routine),
    )


def spectrum_from_eigenvalues(values: np.ndarray) -> Spectrum:
    """A spectrum computed elsewhere (``--eigenvalues``): sorted, floor from float64."""
    lam = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    d = lam.size
    return Spectrum(
        eigenvalues=lam,
        n_samples=None,
        n_features=d,
        definition="eigenvalues given as input (computed elsewhere); sorted descending",
        precision="float64",
        numerical_floor=floor_for(lam, d, 0, "float64"),
        sampling_rank=d,
        structural_zeros=0,
        method="given",
    )


def leading_vectors(m: Moments | None, rows: tuple[np.ndarray, np.ndarray | None] | None, k: int, *,
                    centered: bool, ddof: int = 1) -> np.ndarray:
    """The ``k`` leading eigenvectors of the covariance (or uncentred second moment), as the columns of a
    ``d x k`` array, largest eigenvalue first: from the d x d matrix of ``m`` (LAPACK syevr for those ``k``
    only), or from the kept ``rows = (X, weights)`` by their thin SVD (the n < d route)."""
    if m is not None:
        import scipy.linalg

        C = m.second_moment_matrix(centered=centered, ddof=ddof)
        d = C.shape[0]
        _, V = scipy.linalg.eigh(C, subset_by_index=[d - k, d - 1], driver="evr")
        return V[:, ::-1]
    assert rows is not None
    A, _ = _prepared_rows(*rows, centered=centered)
    _, _, Vt = np.linalg.svd(A, full_matrices=False)
    return Vt[:k].T


#: :func:`leading_subspace`'s products and the vectors beyond those asked for: with 10 more and 12 products the 5th
#: direction is within 3e-3 of LAPACK's (|cos| 0.997) where the spectrum is as flat as j^-0.3 at d = 1,024 (8
#: products and 5 more: 0.63 there), and to 1e-6 on j^-1. Flatter still, the leading directions are nearly degenerate
#: and the iteration returns mixtures of them (|cos| 0.66-0.98 at j^0, d = 512), as a sample's own eigenvectors are.
SUBSPACE_ITERATIONS = 12
SUBSPACE_OVERSAMPLING = 10


def leading_subspace(C: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` leading eigenvectors of the symmetric ``C`` (columns, largest first) by subspace iteration (Halko,
    Martinsson & Tropp 2011): :data:`SUBSPACE_ITERATIONS` products with ``k +`` :data:`SUBSPACE_OVERSAMPLING` vectors
    from a fixed random start, each orthonormalised, then Rayleigh-Ritz; 0.009 s at d = 1,024 and 0.14 s at 4,096,
    where LAPACK's subset (:func:`leading_vectors`) takes 0.07 and 2.3 s. For a reading that needs the directions,
    not their last digits (the coordinates' kurtosis of ``--population``)."""
    d = C.shape[0]
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((d, min(d, k + SUBSPACE_OVERSAMPLING))))[0]
    for _ in range(SUBSPACE_ITERATIONS):
        Q = np.linalg.qr(C @ Q)[0]
    _, U = np.linalg.eigh(Q.T @ C @ Q)
    return (Q @ U[:, ::-1])[:, :k]
