"""Every file format spectra reads or writes, declared once: its extensions, what it is to spectra
(its *kind*), what reads and what writes it, and the first bytes a file of it begins with.

Every place that decides by a file's name or first bytes asks this registry: the dataset resolver
and the opener (:mod:`spectra_cli.sources`), ``spectra info``, ``spectra batch`` (its listing and its
check of a results file), the outputs (:mod:`spectra_cli.sinks`: which targets a matrix may be
written to, which existing files an output may replace), the readers of reports, results and
eigenvalue files, and the figures. A name is matched case-insensitively (``X.NPY`` is an ``.npy``).

Three formats share the ``.npz`` extension: an archive of arrays (:data:`NPZ`), a moment file
(:data:`MOMENTS`) and a whitening transform (:data:`TRANSFORM`). By name a file is :data:`NPZ`
(:func:`by_path`); the other two are told apart by the ``members`` they must hold.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CSV",
    "DATA",
    "FIGURES",
    "FORMATS",
    "HTML",
    "JSON",
    "JSONL",
    "KINDS",
    "MATRIX_OUTPUTS",
    "MOMENTS",
    "NPY",
    "NPZ",
    "PARQUET",
    "PDF",
    "PICKLE",
    "PNG",
    "SAFETENSORS",
    "SVG",
    "TRANSFORM",
    "TSV",
    "Format",
    "by_magic",
    "by_name",
    "by_path",
    "extensions",
]


#: What a file may be to spectra (a format's ``kind``).
KINDS = ("matrix", "moments", "report", "results", "eigenvalues", "transform", "figure", "page", "refused")


@dataclass(frozen=True, slots=True)
class Format:
    """One file format.

    Parameters
    ----------
    name : str
        What reports and listings call it (``SourceInfo.format``, ``spectra info``'s ``format``).
    kind : str
        What the file is to spectra (one of :data:`KINDS`): ``matrix`` (rows to analyse), ``moments``
        (accumulated moments), ``report`` (one JSON report), ``results`` (JSON Lines, one report a
        line), ``eigenvalues`` (a spectrum computed elsewhere), ``transform`` (a whitening transform),
        ``figure``, ``page`` or ``refused`` (never read: a pickle could run code).
    extensions : tuple of str
        The file-name endings, lower case with the dot; the first is the one messages name.
    a_file : str
        The format in a sentence, with its article (``"an .npy file"``).
    magic : tuple of bytes
        What the first bytes of a file of this format may be (any of them); empty where no fixed
        prefix exists (safetensors, text).
    source : str or None
        What reads it, as a dotted name (``spectra_cli.sources.npy.NpySource``); None when nothing does.
    sink : str or None
        What writes it, as a dotted name; None when spectra never writes it.
    members : tuple of str
        For an archive told apart by its contents: the arrays it must hold.
    """

    name: str
    kind: str
    extensions: tuple[str, ...]
    a_file: str
    magic: tuple[bytes, ...] = ()
    source: str | None = None
    sink: str | None = None
    members: tuple[str, ...] = ()

    @property
    def extension(self) -> str:
        """The extension messages name (the first)."""
        return self.extensions[0]

    def matches(self, path: str) -> bool:
        """Whether ``path`` ends in one of the extensions (case-insensitive)."""
        return path.lower().endswith(self.extensions)

    def starts(self, head: bytes) -> bool:
        """Whether ``head`` (a file's first bytes) begins with one of the magic prefixes."""
        return bool(self.magic) and head.startswith(self.magic)


#: A ZIP archive: a local file header, or the end record of an empty archive (``np.savez`` of nothing).
_ZIP = (b"PK\x03\x04", b"PK\x05\x06")

NPY = Format("npy", "matrix", (".npy",), "an .npy file", (b"\x93NUMPY",), source="spectra_cli.sources.npy.NpySource",
             sink="spectra_cli.sinks.MatrixWriter")
NPZ = Format("npz", "matrix", (".npz",), "an .npz archive", _ZIP, source="spectra_cli.sources.npy.NpzSource")
MOMENTS = Format("moments", "moments", (".npz",), "a spectra moment file", _ZIP,
                 source="spectra_cli.stream.moment_file.read", sink="spectra_cli.stream.moment_file.write",
                 members=("format", "meta", "m2"))
TRANSFORM = Format("transform", "transform", (".npz",), "a spectra transform file", _ZIP,
                   source="spectra_cli.transform_file.read", sink="spectra_cli.transform_file.write",
                   members=("mean", "matrix", "method", "eps", "k", "source", "fingerprint", "ddof",
                            "spectra_version"))
PARQUET = Format("parquet", "matrix", (".parquet", ".pq"), "a Parquet file", (b"PAR1",),
                 source="spectra_cli.sources.parquet.ParquetSource", sink="spectra_cli.sinks.MatrixWriter")
SAFETENSORS = Format("safetensors", "matrix", (".safetensors",), "a .safetensors checkpoint",
                     source="spectra_cli.sources.safetensors.SafetensorsSource")
JSON = Format("json", "report", (".json",), "a JSON report", source="spectra_cli.run.compare.load_report")
JSONL = Format("jsonl", "results", (".jsonl",), "a results file", source="spectra_cli.run.summary.read_results",
               sink="spectra_cli.run.results_file.ResultsFile")
CSV = Format("csv", "eigenvalues", (".csv", ".txt"), "a CSV column",
             source="spectra_cli.sources.eigenvalues.read_eigenvalues")
TSV = Format("tsv", "eigenvalues", (".tsv",), "a tab-separated column",
             source="spectra_cli.sources.eigenvalues.read_eigenvalues")
HTML = Format("html", "page", (".html", ".htm"), "an HTML page", (b"<!DOCTYPE html", b"<!doctype html"),
              sink="spectra_cli.run.report.report")
PNG = Format("png", "figure", (".png",), "a PNG image", (b"\x89PNG",), sink="spectra_cli.plot.save")
SVG = Format("svg", "figure", (".svg",), "an SVG image", (b"<?xml", b"<svg"), sink="spectra_cli.plot.save")
PDF = Format("pdf", "figure", (".pdf",), "a PDF document", (b"%PDF",), sink="spectra_cli.plot.save")
PICKLE = Format("pickle", "refused", (".bin", ".pt", ".pth", ".ckpt", ".pkl"), "a PyTorch pickle")

#: Every format, in the order :func:`by_path` and :func:`by_magic` try them.
FORMATS = (NPY, NPZ, MOMENTS, TRANSFORM, PARQUET, SAFETENSORS, JSON, JSONL, CSV, TSV, HTML, PNG, SVG, PDF, PICKLE)
#: The formats a data PATH may be, each read by its own source.
DATA = (NPY, NPZ, PARQUET, SAFETENSORS)
#: The formats a matrix is written to (``spectra whiten -o``, ``sinks.MatrixWriter``).
MATRIX_OUTPUTS = (NPY, PARQUET)
#: The formats a figure is written to, in the order messages list them.
FIGURES = (PNG, SVG, PDF)


def extensions(*formats: Format) -> tuple[str, ...]:
    """The extensions of ``formats``, in order (for ``str.endswith``)."""
    return tuple(dict.fromkeys(e for f in formats for e in f.extensions))


def by_path(path: str, among: tuple[Format, ...] = FORMATS) -> Format | None:
    """The format ``path``'s name says (case-insensitive), the first of ``among`` whose extension it
    ends in; None when none. An ``.npz`` is :data:`NPZ` by name (its members tell a moment file)."""
    lower = path.lower()
    return next((f for f in among if lower.endswith(f.extensions)), None)


def by_name(name: str) -> Format | None:
    """The format called ``name`` (``npy``, ``moments``, ...); None when there is none."""
    return next((f for f in FORMATS if f.name == name), None)


def by_magic(head: bytes, among: tuple[Format, ...] = FORMATS) -> Format | None:
    """The format whose magic ``head`` (a file's first bytes) begins with; None when none. The
    archives share one magic: a ZIP archive is :data:`NPZ` by its first bytes."""
    return next((f for f in among if f.starts(head)), None)
