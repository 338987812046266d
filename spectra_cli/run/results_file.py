"""The results file of a batch: JSON Lines, one report (or failed item, or skipped tensor) a line.

:func:`results_file_problem` says why an existing file is not one (so that a batch never writes over
an array or a page); :class:`ResultsFile` is the file while a batch appends to it: locked, never an
input, and on ``resume`` repaired first (a torn last line, failed items and duplicates dropped, the
kept lines' fingerprints in ``done``). :func:`strict_line` reads a line as every other reader does.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from spectra_cli.errors import OptionError, OutputError, SpectraError, param
from spectra_cli.sources import formats


def parse_line(line: str) -> dict[str, Any] | None:
    """One JSON Lines record, or None when the line is not a JSON object (cut, corrupt, too deep)."""
    try:
        doc = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def strict_line(line: bytes, where: str) -> tuple[dict[str, Any] | None, str | None]:
    """A results line read as every other reader reads it (strict JSON, a known schema): the record, or
    None and why not."""
    from spectra_cli.documents import RESULT_SCHEMAS, check_report_schema
    from spectra_cli.jsonio import loads

    try:
        doc = loads(line, where)
        if not isinstance(doc, dict):
            return None, f"{where}: not a JSON object"
        check_report_schema(doc, where, also=RESULT_SCHEMAS)
    except (SpectraError, RecursionError) as exc:
        return None, str(exc).rstrip(".")
    return doc, None


#: The formats whose first bytes (their magic, :mod:`spectra_cli.sources.formats`) show a file is certainly
#: not JSON Lines, and how the refusal names them.
NOT_RESULTS = {formats.NPZ: "a ZIP archive, such as an .npz or a moment file", formats.NPY: "a .npy array",
               formats.PARQUET: "a Parquet file", formats.PNG: "a PNG image", formats.PDF: "a PDF document"}


def results_file_problem(path: str) -> str | None:
    """Why an existing, non-empty ``path`` is not a spectra results file (None when it is one, or
    when there is nothing there to lose): its first line must be a JSON object whose ``schema`` is
    one of spectra's (a cut first line of a killed run counts: ``--resume`` repairs it)."""
    if os.path.islink(path) and not os.path.exists(path):
        return (f"it is a symbolic link to {os.readlink(path)}, which does not exist (the results would be written "
                "there)")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be read: {exc.strerror}"
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return "it is a FIFO" if stat.S_ISFIFO(st.st_mode) else "it is not a regular file"
        head = f.read(1 << 16)
        while head and not head.strip():  # blank lines before the first record: look past them all
            head = f.read(1 << 16)
        if not head:
            return None  # empty, or nothing but whitespace: nothing to lose
        head = head.lstrip()
        head += f.read(max(0, (1 << 16) - len(head)))  # the whole first line, up to 64 KiB
    found = formats.by_magic(head, tuple(NOT_RESULTS))
    if found is not None:
        return f"it is {NOT_RESULTS[found]}"
    first, newline, _ = head.partition(b"\n")
    if not newline and len(head) >= 1 << 16:
        return "its first line is longer than 64 KiB, not a JSON Lines result"
    if not newline and first.lstrip().startswith(b'{"schema": "spectra.'):
        return None  # one cut line: a batch killed while writing its first result
    doc = parse_line(first.decode("utf-8", "replace"))
    if doc is None:
        return "its first line is not a JSON object"
    schema = doc.get("schema")
    if not isinstance(schema, str) or not schema.startswith("spectra."):
        return f"its first line is JSON with schema {schema!r}, not a spectra report" if schema is not None else \
            "its first line is JSON without a spectra schema"
    return None


class ResultsFile:
    """The JSON Lines output of a batch.

    It is locked for the whole run (a second batch on the same file fails at once instead of
    interleaving lines), never one of the inputs, and on ``resume`` repaired before anything is
    appended: a torn last line (disk full, a killed run), failed items, lines of items whose
    input changed, and duplicates are dropped, by writing the kept lines to a new file that
    replaces the old one atomically. ``done`` maps the fingerprint of each kept item to its line.
    """

    def __init__(self, path: str, *, resume: bool, inputs: list[str], expected: dict[str, Any] | None = None,
                 allow_mismatch: bool = False, overwrite: bool = False) -> None:
        from spectra_cli.sinks import check_directory, check_not_input

        check_directory(path, "jsonl")
        check_not_input(path, inputs, "jsonl")
        why = results_file_problem(path)
        if why is not None:
            raise OutputError(f"{param('jsonl', path)} exists and is not a spectra results file ({why}); name a new "
                              "file, or a results file of an earlier batch.")
        self.path = path
        self.notes: list[str] = []
        self.mismatch: list[str] = []
        self.done: dict[str, dict[str, Any]] = {}
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        self._f = os.fdopen(fd, "r+b")
        self._lock(self._f)
        from spectra_cli.sinks import LIVE_APPENDS

        LIVE_APPENDS.add(path)
        self.retried = 0  # failed items dropped on resume, to be run again
        try:
            if not resume:
                if not overwrite and os.fstat(self._f.fileno()).st_size > 0:
                    raise OutputError(f"{param('jsonl', path)} already holds the results of a batch; "
                                      f"{param('resume')} keeps them (and retries failed items), "
                                      f"{param('overwrite')} replaces them.")
                self._f.truncate(0)
                return
            raw = self._f.read()
            kept, changed = self._keep(raw, expected, allow_mismatch)
            if changed:
                self._replace(kept)
            self._f.seek(0, os.SEEK_END)
        except BaseException:
            self.close()  # releases the lock
            raise

    def _lock(self, f: Any) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no locking
            return
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise OptionError(f"{self.path} is being written by another spectra batch (it is locked); wait for "
                              f"that run or choose another {param('jsonl')} file.") from None

    def _keep(self, raw: bytes, expected: dict[str, Any] | None, allow: bool) -> tuple[list[bytes], bool]:
        from spectra_cli.provenance import check_same_options

        lines = raw.split(b"\n")
        torn = lines.pop() if lines else b""  # text after the last newline: a cut line
        changed = bool(torn.strip())
        if changed:
            self.notes.append(f"{self.path}: dropped a cut last line ({len(torn)} bytes; an interrupted run): its "
                              "item is analysed again")
        kept: list[bytes] = []
        for i, line in enumerate(lines, 1):
            doc, why = strict_line(line, f"{self.path} line {i}") if line.strip() else (None, None)
            fp = doc.get("source", {}).get("fingerprint") if doc and isinstance(doc.get("source"), dict) else None
            if doc is not None and "skipped" in doc:
                fp = doc.get("fingerprint")
            if doc is None or "error" in doc or not isinstance(fp, str) or fp in self.done:
                changed = True
                self.retried += 1 if doc is not None and "error" in doc else 0
                if why is not None:
                    self.notes.append(f"dropped {why}")
                elif doc is not None and "error" not in doc and not isinstance(fp, str):
                    self.notes.append(f"dropped {self.path} line {i}: a report without a source fingerprint: its "
                                      "item is analysed again")
                continue
            if expected is not None and "skipped" not in doc:
                self.mismatch = check_same_options(doc, expected, what=f"{self.path} and this run", allow=allow)
            self.done[fp] = doc
            kept.append(line)
        return kept, changed

    def _replace(self, kept: list[bytes]) -> None:
        from spectra_cli.sinks import atomic_file

        # The new file is locked before it replaces the old one, so no other batch can slip in.
        stack = atomic_file(self.path, flag="jsonl")
        tmp = stack.__enter__()
        try:
            self._lock(tmp)
            tmp.write(b"".join(line + b"\n" for line in kept))
            tmp.flush()
            new = os.fdopen(os.dup(tmp.fileno()), "r+b")
        except BaseException as exc:
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        stack.__exit__(None, None, None)
        self._f.close()
        self._f = new

    def write(self, line: str) -> None:
        self._f.write(line.encode() + b"\n")
        self._f.flush()

    def close(self) -> None:
        from spectra_cli.sinks import LIVE_APPENDS

        LIVE_APPENDS.discard(self.path)
        self._f.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
