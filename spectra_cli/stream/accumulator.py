"""An online accumulator: feed batches of rows as a model runs, no dump needed.

>>> acc = Accumulator(d=768)
>>> for batch in loader:
...     acc.update(hidden_states(batch))       # numpy, or torch/jax/cupy via DLPack
>>> acc.save("layer12.moments.npz")            # plain arrays, no pickle
>>> spectra_cli.fit(acc, window="auto")        # every analysis of fit that needs only moments

It holds the mergeable moments of :mod:`spectra_cli.stream.moments` (and the sums of the exact
mean cosine, and optionally group moments for the bootstrap), so any split of the rows into
batches, processes or machines, merged in any order, gives the same spectrum up to rounding.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from spectra_cli import jsonio
from spectra_cli.errors import InputError, OptionError, OutputError, param
from spectra_cli.options import DEFAULT_BLOCK_ROWS, memory_budget, parse_bytes, refuse_over_budget
from spectra_cli.stream.isotropy_sums import CosineAccumulator
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import HIGHEST, LOWEST, NormHistogram
from spectra_cli.stream.states import MomentsState, RowGuard
from spectra_cli.validate import PRECISIONS, check_bool, check_int, check_path, product_dtype
from spectra_cli.version import __version__

#: The budget of an accumulator whose size was checked elsewhere (a loaded moment file).
UNBOUNDED = 1 << 62
#: The moment-file format; a file of another major version is refused.
FORMAT = "spectra.moments/1"


class Accumulator:
    """Mergeable moments of rows with ``d`` features.

    Args:
        d: number of features of every batch.
        precision: arithmetic of the products (``float64``, or ``float32``: faster, higher floor).
        cosine: also keep the sums of the exact mean cosine and mean norm (O(n d), cheap).
        groups: keep the moments of this many groups of batches, for ``fit(..., ci=True)`` and the sampling curve of
            ``fit(..., population=True)`` (32 for both); batch ``i`` goes to group ``i mod groups``.
        drop_nonfinite: skip rows with NaN/inf (counted in ``n_dropped``) instead of raising.
        block_rows: rows per product inside one large batch.
        max_memory: bytes (or ``"8GB"``) its matrices may take (default half the physical memory):
            ``(3 + groups)`` float64 matrices of d x d are checked against it before any is made.
    """

    def __init__(self, d: int, *, precision: str = "float64", cosine: bool = True, groups: int = 0,
                 drop_nonfinite: bool = False, block_rows: int = DEFAULT_BLOCK_ROWS,
                 max_memory: int | str | None = None) -> None:
        d = check_int("d", d, minimum=1, what="a positive number of features")
        cosine, drop_nonfinite = check_bool("cosine", cosine), check_bool("drop_nonfinite", drop_nonfinite)
        dtype = product_dtype(precision)
        groups = check_int("groups", groups, minimum=0)
        block_rows = check_int("block_rows", block_rows, minimum=1)
        need = (3 + groups) * 8.0 * int(d) * int(d)
        refuse_over_budget("Accumulator", f"d = {int(d)}", need, f"{3 + groups} float64 matrices of {d} x {d}",
                           memory_budget(parse_bytes(max_memory)))
        self.d = int(d)
        self.precision = precision
        self.drop_nonfinite = bool(drop_nonfinite)
        self.block_rows = int(block_rows)
        self._state = MomentsState(self.d, precision=precision, groups=groups)
        self.cosine: CosineAccumulator | None = CosineAccumulator(self.d, dtype=dtype) if cosine else None
        self.weighted: bool | None = None
        self.n_dropped = 0
        self.sources: list[dict[str, Any]] = []

    # -- feeding -------------------------------------------------------------------------------
    def update(self, X: Any, weights: Any = None, *, mask: Any = None) -> None:
        """Add a batch of rows: an array ``(n, d)`` (or ``(..., d)``, flattened to rows), with
        optional row weights ``(n,)`` (or the leading shape). Anything with ``__array__`` or
        ``__dlpack__`` works: torch and JAX tensors of any float dtype, bfloat16 included (converted
        exactly), detached and moved to host memory when they are not there. ``mask``: the leading shape
        of ``X`` (an attention mask ``(batch, tokens)`` beside hidden states ``(batch, tokens, d)``), true
        or nonzero for the rows to keep: padding never enters the moments."""
        from spectra_cli.sources.in_memory import as_array

        A = as_array(X, what="X")
        if A.ndim < 2 or A.shape[-1] != self.d:
            raise InputError(f"X has shape {A.shape}; this accumulator takes rows of d = {self.d} features.")
        from spectra_cli.sources.base import check_numeric_dtype

        check_numeric_dtype(A.dtype, "X")
        lead = A.shape[:-1]
        A = A.reshape(-1, self.d)
        w = None
        if weights is not None:
            W = _leading("weights", weights, lead)
            if W.dtype.kind not in "biuf":
                raise InputError(f"weights has dtype {W.dtype}; numbers are required, one per row.")
            w = W.astype(np.float64).reshape(-1)
        if mask is not None:
            M = _leading("mask", mask, lead)
            if M.dtype.kind not in "biuf" or (M.dtype.kind != "b" and not np.isin(M, (0, 1)).all()):
                raise InputError(f"mask must hold booleans or 0/1 (an attention mask); it has dtype {M.dtype}"
                                 + ("" if M.dtype.kind not in "iuf" else " and other values") + ".")
            keep = M.reshape(-1) != 0
            A = A[keep]
            w = None if w is None else w[keep]
        if self.weighted is None:
            self.weighted = w is not None
            self._state.moments = Moments.empty(self.d, weighted=self.weighted)
            self._state.groups = [Moments.empty(self.d, weighted=self.weighted) for _ in self._state.groups]
        elif self.weighted != (w is not None):
            kind = "with" if self.weighted else "without"
            raise OptionError(f"this accumulator was fed {kind} weights; give every batch weights or none.")
        seen = self.n
        guard = RowGuard("X", drop_nonfinite=self.drop_nonfinite)
        for lo in range(0, A.shape[0], self.block_rows):
            Xb = A[lo:lo + self.block_rows]
            wb = None if w is None else w[lo:lo + self.block_rows]
            Xk, wk = guard.filter(Xb, wb, lambda i, base=seen + lo: base + i)
            if len(Xk):
                self._add(Xk, wk)
        guard.finish()
        self.n_dropped += guard.dropped

    def _add(self, X: np.ndarray, w: np.ndarray | None) -> None:
        self._state.update(X, w)
        if self.cosine is not None:
            self.cosine.update(X, w)

    def merge(self, other: Accumulator) -> Accumulator:
        """Add the rows of another accumulator (this one changes and is returned)."""
        if not isinstance(other, Accumulator):
            raise TypeError(f"merge takes an Accumulator, not {type(other).__name__}.")
        diffs = [f"{k} {a!r} vs {b!r}" for k, a, b in (("d", self.d, other.d),
                                                     ("precision", self.precision, other.precision))
                 if a != b]
        if self.weighted is not None and other.weighted is not None and self.weighted != other.weighted:
            diffs.append(f"weighted {self.weighted} vs {other.weighted}")
        if (self.cosine is None) != (other.cosine is None):
            diffs.append("cosine sums kept by one only")
        if diffs:
            raise OptionError(f"cannot merge moments that differ: {'; '.join(diffs)}.")
        self._state.merge(other._state)
        if self.cosine is not None and other.cosine is not None:
            self.cosine.merge(other.cosine)
        if self.weighted is None:
            self.weighted = other.weighted
        self.n_dropped += other.n_dropped
        self.sources += other.sources
        return self

    # -- what it holds -------------------------------------------------------------------------
    @property
    def moments(self) -> Moments:
        return self._state.moments

    @property
    def n(self) -> int:
        """Rows accumulated (dropped rows not counted)."""
        return self._state.moments.n

    @property
    def groups(self) -> tuple[Moments, ...]:
        return self._state.filled_groups()

    @property
    def weight_sq_sum(self) -> float:
        """``sum w^2`` of the rows (their count when unweighted): Kish's effective sample size."""
        return self._state.weight_sq_sum

    def adopt(self, moments: Moments, *, groups: list[Moments], weight_sq_sum: float, weighted: bool | None,
              n_dropped: int, sources: list[dict[str, Any]]) -> None:
        """Take over moments made elsewhere (a pass, a loaded file): this accumulator then holds them."""
        self._state.moments = moments
        self._state.groups = list(groups)
        self._state.weight_sq_sum = float(weight_sq_sum)
        self.weighted, self.n_dropped, self.sources = weighted, n_dropped, sources

    @classmethod
    def of_pass(cls, moments: Moments, *, groups: tuple[Moments, ...], n_groups: int, weight_sq_sum: float,
                cosine: CosineAccumulator | None, weighted: bool, n_dropped: int, precision: str,
                drop_nonfinite: bool, block_rows: int, sources: list[dict[str, Any]]) -> Accumulator:
        """An accumulator holding what one pass over an input made (``spectra_cli.accumulate``)."""
        acc = cls(moments.d, precision=precision, groups=n_groups, drop_nonfinite=drop_nonfinite,
                  block_rows=block_rows, max_memory=UNBOUNDED)  # the pass checked the budget
        acc.adopt(moments, groups=list(groups), weight_sq_sum=weight_sq_sum, weighted=weighted, n_dropped=n_dropped,
                  sources=sources)
        acc.cosine = cosine
        return acc

    def options(self) -> dict[str, Any]:
        return {"d": self.d, "precision": self.precision, "weighted": bool(self.weighted),
                "drop_nonfinite": self.drop_nonfinite, "block_rows": self.block_rows,
                "cosine": self.cosine is not None, "groups": self._state.n_groups}

    def __repr__(self) -> str:
        return f"Accumulator(d={self.d}, n={self.n}, precision={self.precision!r}, weighted={bool(self.weighted)})"

    # -- files ---------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> str:
        """Write an ``.npz`` of plain arrays (no pickle) atomically; returns the path."""
        from spectra_cli.sinks import atomic_file

        path = check_moment_target(path, "path")
        m = self.moments
        arrays: dict[str, np.ndarray] = {
            "format": np.array(FORMAT),
            "meta": np.array(json.dumps({"options": self.options(), "spectra_version": __version__,
                                         "sources": self.sources, "n_dropped": self.n_dropped,
                                         "weight_sq_sum": self._state.weight_sq_sum})),
            **_moments_arrays("", m),
        }
        groups = self.groups
        if groups:
            for i, g in enumerate(groups):
                arrays.update(_moments_arrays(f"g{i}_", g))
        if self.cosine is not None:
            c = self.cosine
            arrays.update({"cos_unit_sum": c.unit_sum, "cos_scalars": np.array(
                [c.w_sum, c.w2_sum, c.norm_sum, c.zero_rows, c.rows], dtype=np.float64)})
        with atomic_file(path, flag="path") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_memory: int | str | None = None) -> Accumulator:
        """Read a moment file written by :meth:`save` (or ``spectra moments``), every field checked
        (the file was written elsewhere). ``max_memory``: bytes (or ``"8GB"``) its arrays may take,
        checked from their headers before any is read (default half the physical memory)."""
        from spectra_cli.sources.npy import moment_file_sizes, read_npz_arrays

        path = os.fspath(path)
        sizes, d = moment_file_sizes(path)
        need = float(sum(sizes.values()))
        refuse_over_budget(path, "its moments", need, f"arrays of {need / (1 << 20):.3g} MiB (d = {d})",
                           memory_budget(parse_bytes(max_memory)))
        arrays = read_npz_arrays(path)
        return _from_arrays(arrays, path)

    def held_bytes(self) -> int:
        """Bytes of the matrices held: the moments and the groups' (``d x d`` float64 each)."""
        return 8 * self.d * self.d * (1 + len(self._state.groups))


def check_moment_target(path: Any, flag: str) -> str:
    """A moment file's output path: an ``.npz``, and, when it exists, a moment file (of an earlier run:
    replaced), never a file of another kind."""
    from spectra_cli.sources.dataset import moment_file_problem

    path = check_path(flag, path)
    if not path.lower().endswith(".npz"):
        raise OptionError(f"{param(flag, path)}: a moment file must end in .npz.")
    why = moment_file_problem(path) if os.path.lexists(path) else None
    if why is not None:
        raise OutputError(f"{param(flag, path)} exists and is not a moment file ({why}); name a new file (a moment "
                          "file of an earlier run is replaced).")
    return path


def _moments_arrays(prefix: str, m: Moments) -> dict[str, np.ndarray]:
    out = {f"{prefix}scalars": np.array([m.n, m.weight_sum, m.n_positive, m.scale, m.weighted, m.block_rows],
                                        dtype=np.float64),
           f"{prefix}mean_rel": m.mean_rel, f"{prefix}m2": m.m2}
    if m.origin is not None:
        out[f"{prefix}origin"] = m.origin
    if m.norms is not None:
        out[f"{prefix}norms"] = np.concatenate([[m.norms.lo, m.norms.zeros], m.norms.counts])
        if m.norms.fourth is not None:
            out[f"{prefix}fourth"] = np.array([m.norms.fourth, m.norms.fourth_rows], dtype=np.float64)
    return out


#: The largest count a moment file may state (float64 holds every integer up to 2^53 exactly).
MAX_COUNT = 2**53
#: Relative asymmetry and Cauchy-Schwarz excess that rounding may leave in a stored m2.
M2_TOLERANCE = 1e-9


class _Fields:
    """The checks of a moment file's values, each an InputError naming the file and the field: the file
    was written by someone else, and every number in it may lie."""

    def __init__(self, path: str) -> None:
        self.path = path

    def bad(self, field: str, value: Any, required: str) -> InputError:
        if isinstance(value, np.generic):
            value = value.item()
        shown = repr(value) if not isinstance(value, np.ndarray) else f"an array of shape {list(value.shape)}"
        return InputError(f"{self.path}: {field} is {shown[:80]}; {required} is required.")

    def count(self, field: str, value: Any, *, maximum: int | None = None) -> int:
        ok = (not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)
              and math.isfinite(float(value)) and float(value) == math.floor(float(value))
              and 0 <= float(value) <= MAX_COUNT)
        if not ok:
            raise self.bad(field, value, "a count (an integer, 0 or more)")
        n = int(value)
        if maximum is not None and n > maximum:
            raise self.bad(field, value, f"a count of at most {maximum}")
        return n

    def number(self, field: str, value: Any) -> float:
        ok = (not isinstance(value, bool) and isinstance(value, int | float | np.integer | np.floating)
              and math.isfinite(float(value)) and float(value) >= 0)
        if not ok:
            raise self.bad(field, value, "a finite number, 0 or more")
        return float(value)

    def flag(self, field: str, value: Any) -> bool:
        if isinstance(value, bool | np.bool_) or (isinstance(value, int | float | np.integer | np.floating)
                                                   and float(value) in (0.0, 1.0)):
            return bool(value)
        raise self.bad(field, value, "true or false")

    def array(self, arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in arrays:
            raise InputError(f"{self.path} is not a spectra moment file (it has no array {name!r}).")
        a = arrays[name]
        if a.dtype.kind not in "fiu" or a.shape != shape:
            raise self.bad(f"array {name}", a, f"a numeric array of shape {list(shape)}")
        a = np.asarray(a, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise InputError(f"{self.path}: array {name} holds NaN or infinite values; finite moments are required.")
        return a


def _moments_from(arrays: dict[str, np.ndarray], prefix: str, d: int, path: str) -> Moments:
    """One set of moments (the whole input's, or a bootstrap group's), every invariant checked."""
    f = _Fields(path)
    s = f.array(arrays, f"{prefix}scalars", (6,))
    mean_rel = f.array(arrays, f"{prefix}mean_rel", (d,))
    m2 = f.array(arrays, f"{prefix}m2", (d, d))
    origin = f.array(arrays, f"{prefix}origin", (d,)) if f"{prefix}origin" in arrays else None
    where = f"{prefix}scalars"
    n = f.count(f"{where}[0] (rows)", s[0])
    weight_sum = f.number(f"{where}[1] (weight sum)", s[1])
    n_positive = f.count(f"{where}[2] (rows of positive weight)", s[2], maximum=n)
    scale = float(s[3])
    if not scale > 0 or math.frexp(scale)[0] != 0.5:
        raise f.bad(f"{where}[3] (scale)", s[3], "a positive power of two")
    weighted = f.flag(f"{where}[4] (weighted)", s[4])
    block_rows = f.count(f"{where}[5] (rows per block)", s[5], maximum=n)
    if n and not block_rows:
        raise f.bad(f"{where}[5] (rows per block)", s[5], f"a count from 1 to {n} (rows were summed)")
    if not weighted and (weight_sum != n or n_positive != n):
        raise InputError(f"{path}: {where} says {n} unweighted rows but a weight sum of {weight_sum:g} and "
                         f"{n_positive} rows of positive weight; unweighted moments have all three equal.")
    if weighted and (weight_sum > 0) != (n_positive > 0):
        raise InputError(f"{path}: {where} says a weight sum of {weight_sum:g} over {n_positive} rows of positive "
                         "weight; the two must be zero together.")
    level = float(np.max(np.abs(mean_rel + (origin if origin is not None else 0.0)))) if d else 0.0
    _check_m2(m2, path, f"{prefix}m2", uncentred=weight_sum * level * level)
    norms = _norms_from(arrays, f"{prefix}norms", n_positive, path) if f"{prefix}norms" in arrays else None
    if norms is not None and f"{prefix}fourth" in arrays:
        norms = norms.with_fourth(*_fourth_from(arrays, f"{prefix}fourth", 0 if weighted else n_positive, path))
    if norms is not None and not weighted and norms.counts.size:
        # each block's norms about its own mean sum to at most the trace about the global one, and the
        # unshrinking 1 / (1 - 1/b) at most doubles them (b >= 2), the bins' centres add 1.1 %
        v, c = norms.values()
        total = float(np.dot(c, v / scale / scale))
        bound = 2.05 * float(np.trace(m2)) + 1e-300
        if not total <= bound:
            trace = float(np.trace(m2)) * scale * scale
            raise InputError(f"{path}: array {prefix}norms holds squared row norms summing to "
                             f"{total * scale * scale:.4g}, more than twice the trace of its second moment "
                             f"({trace:.4g}); the norms and the moments are not of the same rows.")
    return Moments(n, weight_sum, n_positive, mean_rel, m2, scale, weighted, block_rows, origin, norms)


def _norms_from(arrays: dict[str, np.ndarray], name: str, rows: int, path: str) -> NormHistogram:
    """The histogram of squared row norms: ``[lo, zeros, counts...]``, bins within float64's range, whole
    counts that add up to the rows of positive weight."""
    a = arrays[name]
    if a.dtype.kind not in "fiu" or a.ndim != 1 or not 2 <= a.size <= 2 + HIGHEST - LOWEST:
        raise InputError(f"{path}: array {name} is not a histogram of row norms (a 1-D array [lo, zeros, counts...] "
                         f"of at most {2 + HIGHEST - LOWEST} numbers).")
    a = np.asarray(a, dtype=np.float64)
    if not np.all(np.isfinite(a)) or np.any(a[1:] < 0) or np.any(a != np.round(a)):
        raise InputError(f"{path}: array {name} holds a count that is not a whole number of rows (or a NaN).")
    lo = float(a[0])
    if not LOWEST <= lo <= HIGHEST + 2 - a.size:
        raise InputError(f"{path}: array {name} starts at bin {lo:g}, outside the bins of float64 "
                         f"[{LOWEST}, {HIGHEST}] for its {a.size - 2} counts.")
    if float(a[1:].sum()) != rows:
        raise InputError(f"{path}: array {name} counts {float(a[1:].sum()):g} rows but its moments {rows} rows of "
                         "positive weight; the histogram counts each of them once.")
    return NormHistogram(int(lo), a[2:], float(a[1]))


def _fourth_from(arrays: dict[str, np.ndarray], name: str, rows: int, path: str) -> tuple[float, float]:
    """The sum of the features' fourth central moments and the rows it covers: ``[sum, rows]``, finite, the rows a
    whole number of at most the unweighted rows (none for weighted moments)."""
    a = arrays[name]
    if a.dtype.kind not in "fiu" or a.shape != (2,):
        raise InputError(f"{path}: array {name} is not the sum of fourth moments (a 1-D array [sum, rows] of 2 "
                         "numbers).")
    a = np.asarray(a, dtype=np.float64)
    if not np.all(np.isfinite(a)) or not 0 <= a[1] <= rows or a[1] != round(a[1]):
        raise InputError(f"{path}: array {name} holds [{a[0]:g}, {a[1]:g}]: a finite sum over a whole number of rows "
                         f"from 0 to {rows} (the unweighted rows; weighted moments have none) is required.")
    return float(a[0]), float(a[1])


def _check_groups_total(groups: list[Moments], m: Moments, path: str) -> None:
    """The bootstrap resamples the groups: merged, they must be the whole input's moments (count,
    weights, mean and second moment, to rounding), or every interval built from them is wrong."""
    merged = groups[0]
    for g in groups[1:]:
        merged = merged.merge(g)
    if any(g.weighted != m.weighted for g in groups):
        raise InputError(f"{path}: its groups and its moments disagree on whether rows are weighted.")
    scale = merged.scale / m.scale
    tot_m2 = m.m2
    top = float(np.max(np.abs(np.diag(tot_m2)))) if tot_m2.size else 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        mean_gap = float(np.max(np.abs(merged.mean * merged.scale - m.mean * m.scale))) if m.d else 0.0
        m2_gap = float(np.max(np.abs(merged.m2 * scale * scale - tot_m2))) if m.d else 0.0
    spread = float(np.sqrt(top / max(m.weight_sum, 1e-300))) * m.scale if m.weight_sum else 0.0
    ok = (abs(merged.weight_sum - m.weight_sum) <= 1e-9 * max(m.weight_sum, 1e-300) + 1e-300
          and np.isfinite(mean_gap) and mean_gap <= 1e-6 * max(spread, float(np.max(np.abs(m.mean * m.scale)))
                                                              if m.d else 1.0) + 1e-300
          and np.isfinite(m2_gap) and m2_gap <= 1e-8 * max(top, 1e-300))
    if not ok:
        raise InputError(f"{path}: its bootstrap groups, merged, are not its moments (weight sum, mean or second "
                         "moment differ beyond rounding); the groups must split the rows.")


def _check_m2(m2: np.ndarray, path: str, name: str, *, uncentred: float = 0.0) -> None:
    """A sum of outer products is symmetric and positive semi-definite: checked in O(d^2) as symmetry,
    non-negative diagonal and |m2_ij| <= sqrt(m2_ii m2_jj) (Cauchy-Schwarz), all to rounding."""
    diag = np.diag(m2)
    top = float(diag.max()) if diag.size else 0.0
    # rounding is relative to the data's own size: its spread, or its offset (uncentred: W |mean|^2)
    tol = M2_TOLERANCE * max(top, float(np.abs(m2).max()) if m2.size else 0.0, uncentred) + 1e-300
    if m2.size and float(np.abs(m2 - m2.T).max()) > tol:
        raise InputError(f"{path}: array {name} is not symmetric (a second moment is a sum of outer products).")
    if diag.size and float(diag.min()) < -tol:
        raise InputError(f"{path}: array {name} has a negative diagonal entry ({float(diag.min()):.3g}); a second "
                         "moment is positive semi-definite.")
    root = np.sqrt(np.clip(diag, 0.0, None))
    for i in range(0, m2.shape[0], 256):  # row blocks: no d x d temporary
        with np.errstate(over="ignore"):  # a bound past float64 is inf: no entry exceeds it
            bound = np.outer(root[i:i + 256], root) * (1 + M2_TOLERANCE) + tol
        if np.any(np.abs(m2[i:i + 256]) > bound):
            raise InputError(f"{path}: array {name} is not positive semi-definite (an entry exceeds the geometric "
                             "mean of its diagonal entries).")


def _from_arrays(arrays: dict[str, np.ndarray], path: str) -> Accumulator:
    fmt = str(arrays.get("format", ""))
    if fmt.split("/")[0] != FORMAT.split("/")[0]:
        raise InputError(f"{path} is not a spectra moment file (format {fmt or 'missing'}; expected {FORMAT}).")
    if fmt != FORMAT:
        raise InputError(f"{path} has moment-file format {fmt}; this spectra reads {FORMAT}.")
    f = _Fields(path)
    if "meta" not in arrays or arrays["meta"].dtype.kind != "U" or arrays["meta"].shape != ():
        raise InputError(f"{path} is not a spectra moment file (its meta is not one string).")
    meta = jsonio.loads(str(arrays["meta"]), f"{path} metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("options"), dict):
        raise InputError(f"{path}: its metadata is not an object with options.")
    opts = meta["options"]
    d = f.count("meta options.d", opts.get("d"))
    if d < 1 or isinstance(opts.get("d"), float):
        raise f.bad("meta options.d", opts.get("d"), "a positive integer")
    m2_shape = arrays["m2"].shape if "m2" in arrays else None
    if m2_shape != (d, d):  # checked before anything of size d is made: a header may lie
        raise InputError(f"{path}: its metadata says d = {d} but its m2 array has shape "
                         f"{list(m2_shape) if m2_shape is not None else 'missing'}.")
    precision = opts.get("precision", "float64")
    if precision not in PRECISIONS:
        raise f.bad("meta options.precision", precision, f"one of {', '.join(PRECISIONS)}")
    n_groups = f.count("meta options.groups", opts.get("groups", 0))
    block_rows = f.count("meta options.block_rows", opts.get("block_rows", DEFAULT_BLOCK_ROWS))
    if block_rows < 1:
        raise f.bad("meta options.block_rows", opts.get("block_rows"), "a positive integer")
    cosine = f.flag("meta options.cosine", opts.get("cosine", True))
    acc = Accumulator(d, precision=precision, cosine=cosine, groups=n_groups,
                      drop_nonfinite=f.flag("meta options.drop_nonfinite", opts.get("drop_nonfinite", False)),
                      block_rows=block_rows, max_memory=UNBOUNDED)  # the budget was checked from the headers
    m = _moments_from(arrays, "", d, path)
    weighted = f.flag("meta options.weighted", opts.get("weighted", False))
    if m.n and weighted != m.weighted:
        raise InputError(f"{path}: its metadata says weighted {weighted} but its moments say {m.weighted}.")
    saved = sorted(int(k[1:-len("_scalars")]) for k in arrays
                   if k.startswith("g") and k.endswith("_scalars") and k[1:-len("_scalars")].isdigit())
    if len(saved) > n_groups:
        raise InputError(f"{path}: it holds {len(saved)} groups but its metadata says {n_groups}.")
    if saved and saved[-1] >= n_groups:
        raise InputError(f"{path}: it holds group g{saved[-1]} but its metadata says {n_groups} groups.")
    groups = [_moments_from(arrays, f"g{i}_", d, path) for i in saved]
    if groups and sum(g.n for g in groups) != m.n:
        raise InputError(f"{path}: its groups hold {sum(g.n for g in groups)} rows but its moments {m.n}; the groups "
                         "split the rows.")
    if groups:
        _check_groups_total(groups, m, path)
    n_dropped = f.count("meta n_dropped", meta.get("n_dropped", 0))
    w2 = f.number("meta weight_sq_sum", meta.get("weight_sq_sum", m.n))
    if not m.weighted and w2 != m.n:
        raise InputError(f"{path}: meta weight_sq_sum is {w2:g} for {m.n} unweighted rows; it is their count.")
    W = m.weight_sum
    if m.weighted and W > 0 and (w2 <= 0 or W * W > m.n_positive * w2 * (1 + 1e-9) or w2 > W * W * (1 + 1e-9)):
        # (sum w)^2 / sum w^2 lies in [1, rows of positive weight] (products, never powers: no OverflowError)
        raise InputError(f"{path}: meta weight_sq_sum {w2:g} with a weight sum of {W:g} gives an effective sample size "
                         f"(sum w)^2 / sum w^2 outside [1, {m.n_positive}] (the rows of positive weight).")
    if m.weighted and m.n_positive and not 1e-250 <= W / m.n_positive <= 1e250 * m.n_positive:
        raise InputError(f"{path}: a weight sum of {W:g} over {m.n_positive} rows lies outside the weights spectra "
                         "accepts (1e-250 to 1e250 a row).")
    sources = meta.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(x, dict) for x in sources):
        raise f.bad("meta sources", sources, "a list of objects")
    acc.adopt(m, groups=groups, weight_sq_sum=w2, weighted=m.weighted if m.n else None, n_dropped=n_dropped,
              sources=list(sources))
    if acc.cosine is not None:
        c = acc.cosine
        sc = f.array(arrays, "cos_scalars", (5,))
        c.unit_sum = f.array(arrays, "cos_unit_sum", (d,))
        c.w_sum = f.number("cos_scalars[0] (weight sum)", sc[0])
        c.w2_sum = f.number("cos_scalars[1] (sum of squared weights)", sc[1])
        c.norm_sum = f.number("cos_scalars[2] (sum of norms)", sc[2])
        c.rows = f.count("cos_scalars[4] (rows)", sc[4], maximum=m.n)
        c.zero_rows = f.count("cos_scalars[3] (all-zero rows)", sc[3], maximum=c.rows)
        if c.rows != m.n:
            raise InputError(f"{path}: cos_scalars[4] counts {c.rows} rows but its moments {m.n}; both count the rows "
                             "accumulated.")
        if not m.weighted and not (c.w_sum == c.w2_sum == c.rows - c.zero_rows):
            raise InputError(f"{path}: cos_scalars (weight sum {c.w_sum:g}, of squares {c.w2_sum:g}) do not count the "
                             f"{c.rows - c.zero_rows} non-zero unweighted rows; both must.")
        if float(np.linalg.norm(c.unit_sum)) > c.w_sum * (1 + 1e-9) + 1e-300:
            raise InputError(f"{path}: array cos_unit_sum is longer than its weight sum; a sum of unit vectors "
                             "never is.")
    return acc


def _leading(name: str, value: Any, lead: tuple[int, ...]) -> np.ndarray:
    """Per-row values (weights, a mask) in X's leading shape, or one flat value per row."""
    from spectra_cli.sources.in_memory import as_array

    if np.ndim(value) == 0 and not hasattr(value, "__dlpack__"):
        raise InputError(f"{name} must be an array of X's leading shape {tuple(lead)}, one value per row.")
    if isinstance(value, np.ma.MaskedArray):
        raise InputError(f"{name} is a numpy masked array; pass a plain array (its mask would be ignored).")
    V = as_array(value, what=name)
    rows = int(np.prod(lead)) if lead else 0
    if tuple(V.shape) != tuple(lead) and not (V.ndim == 1 and V.shape[0] == rows):
        raise InputError(f"{name} has shape {tuple(V.shape)}; it must have X's leading shape {tuple(lead)}, or be "
                         f"one value per row ({rows},).")
    return V
