"""The moment file: what :meth:`Accumulator.save <spectra_cli.stream.accumulator.Accumulator.save>` and
``spectra moments`` write and every command reads back, written, read and checked here only.

An ``.npz`` archive of plain arrays (never a pickle: only numeric and text arrays are read):

- ``format``: the text ``spectra.moments/1``; a file of another major version is refused.
- ``meta``: one JSON text: ``options`` (``d``, ``precision``, ``weighted``, ``drop_nonfinite``,
  ``block_rows``, ``cosine``, ``groups``), ``spectra_version``, ``sources`` (where the rows came
  from), ``n_dropped`` and ``weight_sq_sum``.
- the moments (:class:`~spectra_cli.stream.moments.Moments`): ``scalars`` ``[n, weight_sum,
  n_positive, scale, weighted, block_rows]``, ``mean_rel`` ``(d,)``, ``m2`` ``(d, d)``, and where
  there is one ``origin`` ``(d,)``, the histogram of squared row norms ``norms`` ``[lo, zeros,
  counts...]`` and the fourth moments ``fourth`` ``[sum, rows]``;
- the same arrays prefixed ``g0_``, ``g1_``, ... for each bootstrap group that holds rows;
- the cosine sums: ``cos_unit_sum`` ``(d,)`` and ``cos_scalars`` ``[w_sum, w2_sum, norm_sum,
  zero_rows, rows]``.

A file was written by someone else and every number in it may lie: :func:`read` checks the memory
its arrays take from their headers before reading any, then every field and every invariant of
the moments (counts, symmetry and semi-definiteness of ``m2``, groups that merge to the whole), each
refusal an InputError naming the file and the field. Which ``.npz`` is a moment file at all (its
``format``, ``meta`` and ``m2`` members) is told on the sources floor, where the dataset is resolved
(:func:`spectra_cli.sources.dataset.moment_file_problem`, from the registry of formats).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from spectra_cli import jsonio
from spectra_cli.errors import InputError, OptionError, OutputError, param
from spectra_cli.options import DEFAULT_BLOCK_ROWS, memory_budget, parse_bytes, refuse_over_budget
from spectra_cli.sinks import atomic_file
from spectra_cli.sources import formats
from spectra_cli.sources.dataset import moment_file_problem
from spectra_cli.sources.npy import npz_headers, read_npz_members
from spectra_cli.stream.isotropy_sums import CosineAccumulator
from spectra_cli.stream.moments import Moments
from spectra_cli.stream.norms import HIGHEST, LOWEST, NormHistogram
from spectra_cli.stream.states import MAX_WEIGHT, MIN_WEIGHT
from spectra_cli.validate import PRECISIONS, check_path, product_dtype
from spectra_cli.version import __version__

#: The moment-file format; a file of another major version is refused.
FORMAT = "spectra.moments/1"
#: The arrays of one set of moments (the whole input's, unprefixed; a group's, prefixed ``g<i>_``).
MOMENT_ARRAYS = ("scalars", "mean_rel", "m2", "origin", "norms", "fourth")
#: Every array a moment file may hold besides the groups' (anything else in the archive is never read).
ARRAYS = frozenset({"format", "meta", *MOMENT_ARRAYS, "cos_unit_sum", "cos_scalars"})


@dataclass(frozen=True, slots=True)
class MomentFile:
    """What a moment file holds, every field checked: the accumulator's options, its moments, the filled
    bootstrap groups and the cosine sums, and where the rows came from."""

    d: int
    precision: str
    n_groups: int  # the groups the accumulator keeps (``groups`` hold the filled ones)
    block_rows: int
    drop_nonfinite: bool
    weighted: bool | None  # None before any row
    moments: Moments
    groups: tuple[Moments, ...]
    weight_sq_sum: float
    n_dropped: int
    sources: tuple[dict[str, Any], ...]
    cosine: CosineAccumulator | None

    def options(self) -> dict[str, Any]:
        """The ``options`` of the file's metadata."""
        return {"d": self.d, "precision": self.precision, "weighted": bool(self.weighted),
                "drop_nonfinite": self.drop_nonfinite, "block_rows": self.block_rows,
                "cosine": self.cosine is not None, "groups": self.n_groups}


def is_member(key: str) -> bool:
    """An array a moment file holds: ``format``, ``meta``, the moments, the cosine sums and groups."""
    if key in ARRAYS:
        return True
    head, _, tail = key.partition("_")
    return head[:1] == "g" and head[1:].isdigit() and tail in MOMENT_ARRAYS


def check_target(path: Any, flag: str) -> str:
    """A moment file's output path: an ``.npz``, and, when it exists, a moment file (of an earlier run:
    replaced), never a file of another kind."""
    path = check_path(flag, path)
    if not formats.MOMENTS.matches(path):
        raise OptionError(f"{param(flag, path)}: a moment file must end in .npz.")
    why = moment_file_problem(path) if os.path.lexists(path) else None
    if why is not None:
        raise OutputError(f"{param(flag, path)} exists and is not a moment file ({why}); name a new file (a moment "
                          "file of an earlier run is replaced).")
    return path


def write(path: str | os.PathLike[str], contents: MomentFile) -> str:
    """Write ``contents`` to ``path`` (an ``.npz`` of plain arrays, no pickle) atomically; returns the path."""
    path = check_target(path, "path")
    arrays: dict[str, np.ndarray] = {
        "format": np.array(FORMAT),
        "meta": np.array(json.dumps({"options": contents.options(), "spectra_version": __version__,
                                     "sources": list(contents.sources), "n_dropped": contents.n_dropped,
                                     "weight_sq_sum": contents.weight_sq_sum})),
        **_moments_arrays("", contents.moments),
    }
    for i, g in enumerate(contents.groups):
        arrays.update(_moments_arrays(f"g{i}_", g))
    if contents.cosine is not None:
        c = contents.cosine
        arrays.update({"cos_unit_sum": c.unit_sum, "cos_scalars": np.array(
            [c.w_sum, c.w2_sum, c.norm_sum, c.zero_rows, c.rows], dtype=np.float64)})
    with atomic_file(path, flag="path") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]
    return path


def header_sizes(path: str) -> tuple[dict[str, int], int]:
    """The bytes each array of a moment file takes once read (as float64 where it is numeric, from its
    header alone, nothing read), and the width of its ``m2``. Members that are not arrays of a moment
    file are left out (they are never read)."""
    sizes: dict[str, int] = {}
    d = 0
    for key, (shape, dtype) in npz_headers(path, is_member).items():
        sizes[key] = math.prod(shape) * max(dtype.itemsize, 8)
        if key == "m2" and len(shape) == 2:
            d = max(shape)
    return sizes, d


def check_budget(path: str, budget: int, *, held: int = 0) -> None:
    """Refuse, from its member headers alone, a moment file whose arrays (and a merge's working copy of
    its d x d moments, beside the ``held`` bytes of the files merged before it) would not fit the budget."""
    sizes, d = header_sizes(path)
    nbytes = float(sum(sizes.values())) + 2 * 8.0 * d * d + held  # the merged moments and one product's temporary
    matrices = max(1, round(nbytes / (8 * d * d))) if d else 0
    refuse_over_budget(path, "its moments", nbytes, f"{matrices} float64 matrices of {d} x {d}", budget)


def read(path: str | os.PathLike[str], *, max_memory: int | str | None = None) -> MomentFile:
    """What a moment file holds, every field checked (the file was written elsewhere). ``max_memory``:
    bytes (or ``"8GB"``) its arrays may take, checked from their headers before any is read (default half
    the physical memory)."""
    path = os.fspath(path)
    sizes, d = header_sizes(path)
    need = float(sum(sizes.values()))
    refuse_over_budget(path, "its moments", need, f"arrays of {need / (1 << 20):.3g} MiB (d = {d})",
                       memory_budget(parse_bytes(max_memory)))
    return _contents(read_npz_members(path, is_member), path)


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
    m2 = _symmetric(m2)
    norms = _norms_from(arrays, f"{prefix}norms", n_positive, path) if f"{prefix}norms" in arrays else None
    if norms is not None and f"{prefix}fourth" in arrays:
        norms = norms.with_fourth(*_fourth_from(arrays, f"{prefix}fourth", 0 if weighted else n_positive, path))
    if norms is not None and not weighted and norms.counts.size and not prefix:
        # the rows' norms (about the mean of the rows read before them, made unbiased; the first block about its
        # own) sum to about the trace about the global mean: more than four times it, and they are not of the
        # same rows. (A group's rows are taken about the mean of every row before them, not the group's own:
        # a group of 2 rows reads about twice its own trace, so groups are not held to it.)
        v, c = norms.values()
        total = float(np.dot(c, v / scale / scale))
        bound = 4.0 * float(np.trace(m2)) + 1e-300
        if not total <= bound:
            trace = float(np.trace(m2)) * scale * scale
            raise InputError(f"{path}: array {prefix}norms holds squared row norms summing to "
                             f"{total * scale * scale:.4g}, more than four times the trace of its second moment "
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


def _symmetric(m2: np.ndarray) -> np.ndarray:
    """``(m2 + m2^T) / 2``, in place a block of rows at a time (no d x d temporary): a file written by spectra holds
    a symmetric matrix, bit for bit, and keeps every bit; one whose triangles differ within :func:`_check_m2`'s
    tolerance (an offset's rounding allows much) is read as their mean, whichever triangle a reader takes (the
    grouped errors read the lower one)."""
    m2 = m2 if m2.flags.writeable and m2.dtype == np.float64 else np.array(m2, dtype=np.float64)
    for a in range(0, m2.shape[0], 256):
        b = min(a + 256, m2.shape[0])
        below = (m2[a:b, :a] + m2[:a, a:b].T) * 0.5
        m2[a:b, :a] = below
        m2[:a, a:b] = below.T
        block = m2[a:b, a:b]
        block[...] = (block + block.T) * 0.5
    return m2


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


def _contents(arrays: dict[str, np.ndarray], path: str) -> MomentFile:
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
    drop_nonfinite = f.flag("meta options.drop_nonfinite", opts.get("drop_nonfinite", False))
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
    if m.weighted and m.n_positive and not MIN_WEIGHT <= W / m.n_positive <= MAX_WEIGHT * m.n_positive:
        raise InputError(f"{path}: a weight sum of {W:g} over {m.n_positive} rows lies outside the weights spectra "
                         f"accepts ({MIN_WEIGHT:g} to {MAX_WEIGHT:g} a row).")
    sources = meta.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(x, dict) for x in sources):
        raise f.bad("meta sources", sources, "a list of objects")
    c: CosineAccumulator | None = None
    if cosine:
        c = CosineAccumulator(d, dtype=product_dtype(precision))
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
    return MomentFile(d, precision, n_groups, block_rows, drop_nonfinite, m.weighted if m.n else None, m,
                      tuple(groups), w2, n_dropped, tuple(sources), c)
