"""``spectra batch``: many matrices (files, directories, globs, every 2-D tensor of safetensors
checkpoints), analysed in worker processes, one JSON line per item.

Each successful line is a ``fit`` report (the same schema) with ``item`` added; a failed item is
``{"schema": "spectra.batch-error/1", "item", "fingerprint", "error"}`` and does not stop the batch.
``resume`` skips items whose line is already in the output with the same fingerprint.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Unpack

from spectra_cli.analysis.suite import FitKeywords, check_fit_keywords, resolve_convention
from spectra_cli.errors import InputError, OptionError, OutputError, SpectraError, param
from spectra_cli.options import ENGINES
from spectra_cli.results import ERROR_SCHEMA, SKIP_SCHEMA
from spectra_cli.run.matrix import keywords_checked
from spectra_cli.sources import formats
from spectra_cli.sources.base import expand_glob, fingerprint, is_glob
from spectra_cli.sources.dataset import is_moment_file
from spectra_cli.threads import ENV_VARS, worker_threads
from spectra_cli.validate import check_choice, check_int, check_number, check_path, check_paths, check_regex
from spectra_cli.version import __version__

#: The data files of a folder besides its checkpoint's shards (those are listed by the safetensors reader).
FOLDER_FORMATS = (formats.NPY, formats.NPZ, formats.PARQUET)


@dataclass(frozen=True, slots=True)
class Item:
    name: str  # what open_source takes: a path, path::tensor or path::key
    fingerprint: str
    error: str | None = None  # the file could not even be listed: the item fails with this
    shape: tuple[int, ...] | None = None  # a checkpoint tensor's, from its header


@dataclass(frozen=True, slots=True)
class Skip:
    """A tensor or array that is not a weight matrix: why, and under which kind it is counted."""

    name: str
    kind: str  # "vector", "scalar", "integer buffer", "boolean buffer", "tensor of 3+ dimensions", ...
    reason: str
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SKIP_SCHEMA, "spectra_version": __version__, "item": self.name,
                "fingerprint": self.fingerprint, "skipped": self.reason, "kind": self.kind}


@dataclass
class Listing:
    """What enumerating the inputs found besides the items."""

    skipped: list[Skip]
    notes: list[str]

    def skip_summary(self) -> str | None:
        """One line: ``skipped 66 vectors, 1 integer buffer``."""
        if not self.skipped:
            return None
        counts: dict[str, int] = {}
        for sk in self.skipped:
            counts[sk.kind] = counts.get(sk.kind, 0) + 1
        parts = [f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        why = ("not weight matrices, or layers WeightWatcher skips" if "WeightWatcher-skipped layer" in counts
               else "not weight matrices")
        return "skipped " + ", ".join(parts) + f" ({why}; --verbose lists them)"


def _pickle_refusal(path: str) -> InputError:
    return InputError(f"{path} is a PyTorch pickle; spectra never unpickles (loading it could run code). Save the "
                      "weights as safetensors (safetensors.torch.save_file, or save_pretrained(..., "
                      "safe_serialization=True)) and pass the .safetensors file or its folder.")


def _readable_name(path: str) -> bool:
    """File names that are not valid UTF-8 cannot be reported in JSON: they are skipped with a note."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _found(directory: str) -> str:
    """What a directory without matrices holds instead (its sub-folders are searched too), and what reads it."""
    kinds: dict[str, int] = {}
    for _, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for f in files:
            ext = os.path.splitext(f)[1].lower() or "(no extension)"
            kinds[ext] = kinds.get(ext, 0) + 1
        if sum(kinds.values()) > 10_000:
            break
    if not kinds:
        return ", in it or in its sub-folders: it is empty"
    shown = ", ".join(f"{n} {ext}" for ext, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:4])
    hint = ("; results files (.jsonl) are read by spectra batch --summary, spectra trend and spectra report"
            if formats.JSONL.extension in kinds else "")
    return f", in it or in its sub-folders (it holds {shown}){hint}"


def _expand(path: str, notes: list[str]) -> list[str]:
    from spectra_cli.sources import remote

    if remote.is_url(path):  # data where it lives: a Hub repository, a bucket, through the same rules
        if remote.is_glob_url(path):
            found = remote.glob(path)
            if not found:
                raise InputError(f"no files match {path}")
            return found
        if remote.isdir(path):
            from spectra_cli.sources.safetensors import shard_files

            shards = shard_files(path)
            others = remote.find(path, formats.extensions(*FOLDER_FORMATS))
            if not shards and not others:
                raise InputError(f"directory {path} holds no .npy, .npz, .parquet or .safetensors files.")
            return shards + others
        if not remote.exists(path):
            raise InputError(f"no such file or directory: {path}")
        return [path]
    if is_glob(path):
        return expand_glob(path)
    if os.path.isdir(path):
        from spectra_cli.sources.safetensors import shard_files

        shards = shard_files(path)
        others = []
        pickles = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            for f in files:
                full = os.path.join(root, f)
                if formats.PICKLE.matches(f) and root == path:
                    pickles.append(full)
                if formats.by_path(f, FOLDER_FORMATS) is None or f.startswith((".", "_")):
                    continue
                if not _readable_name(full):
                    notes.append(f"skipped a file in {root} whose name is not valid UTF-8 "
                                 f"({full.encode('utf-8', 'replace').decode()}); rename it to include it")
                elif not os.path.isfile(full):
                    notes.append(f"skipped {full}: not a regular file (a pipe, socket or device); copy it to a "
                                 "regular file to include it")
                else:
                    others.append(full)
        if not shards and not others:
            if pickles:
                raise _pickle_refusal(sorted(pickles)[0])
            raise InputError(f"directory {path} holds no .npy, .npz, .parquet or .safetensors files{_found(path)}.")
        if pickles and shards:
            notes.append(f"ignored {len(pickles)} PyTorch pickle(s) beside the safetensors weights (never unpickled); "
                         "if they hold other weights, convert them to .safetensors to include them")
        return shards + sorted(others)
    if not os.path.lexists(path):
        raise InputError(f"no such file or directory: {path}")
    if formats.PICKLE.matches(path):
        raise _pickle_refusal(path)
    return [path]


def _listing(f: str, pattern: re.Pattern[str] | None, listing: Listing, counts: list[int]) -> list[Item]:
    """The items of one file: each 2-D tensor of a checkpoint, each array of an archive, or the file."""
    fmt = formats.by_path(f, formats.DATA)
    out: list[Item] = []
    if fmt is formats.SAFETENSORS:
        from spectra_cli.sources.safetensors import list_tensors, matrix_skip

        for t in list_tensors(f):
            counts[0] += 1
            name = f"{f}::{t['name']}"
            if pattern is not None and not pattern.search(t["name"]):
                continue
            counts[1] += 1
            why = matrix_skip(str(t["dtype"]), list(t["shape"]))
            if why is not None:
                listing.skipped.append(Skip(name, why[0], why[1], fingerprint(name)))
                continue
            out.append(Item(name, fingerprint(name), shape=tuple(int(x) for x in t["shape"])))
    elif fmt is formats.NPZ and is_moment_file(f):  # moments of one matrix (``spectra moments``)
        out.append(Item(f, fingerprint(f)))
    elif fmt is formats.NPZ:
        from spectra_cli.sources.npy import npz_listing

        arrays = npz_listing(f)
        for a in arrays:
            name = f"{f}::{a['key']}" if len(arrays) > 1 else f
            if "error" in a:
                out.append(Item(name, fingerprint(name), a["error"]))
            elif len(a["shape"]) not in (2, 3):
                listing.skipped.append(Skip(name, "vector" if len(a["shape"]) == 1 else "not a matrix",
                                            f"shape {a['shape']} is not a matrix", fingerprint(name)))
            else:
                out.append(Item(name, fingerprint(name)))
    elif fmt is not None:
        out.append(Item(f, fingerprint(f)))
    else:
        listing.notes.append(f"skipped {f}: not a .npy, .npz, .parquet or .safetensors file; save it as one of these "
                             "to include it")
    return out


def enumerate_items(paths: list[str], tensors: str | None = None) -> tuple[list[Item], Listing]:
    """Items in a stable order, and what was skipped (vectors, integer buffers, ...) with notes. A file
    that cannot be listed (a corrupt checkpoint header) becomes one failed item, not a failed batch."""
    pattern = check_regex("tensors", tensors) if tensors else None
    items: list[Item] = []
    listing = Listing([], [])
    seen: set[str] = set()
    counts = [0, 0]  # tensors seen, tensors matching --tensors
    names: list[str] = []
    files_seen: dict[tuple[int, int], str] = {}
    for path in paths:
        for f in _expand(path, listing.notes):
            try:
                st = os.stat(f.partition("::")[0])
                ident = (st.st_dev, st.st_ino)
            except OSError:
                ident = None
            if ident is not None and files_seen.setdefault(ident, f) != f:
                listing.notes.append(f"skipped {f}: the same file as {files_seen[ident]} (a link), analysed once")
                continue
            try:
                found = _listing(f, pattern, listing, counts)
            except SpectraError as exc:
                found = [Item(f, fingerprint(f), str(exc))]
            for it in found:
                if it.name not in seen:
                    seen.add(it.name)
                    items.append(it)
            if formats.SAFETENSORS.matches(f) and pattern is not None and len(names) < 5:
                from spectra_cli.sources.safetensors import list_tensors

                try:
                    names += [t["name"] for t in list_tensors(f)][: 5 - len(names)]
                except SpectraError:
                    pass
    if pattern is not None and counts[0] and not counts[1]:
        raise OptionError(f"{param('tensors', tensors)} matches none of the {counts[0]} tensors "
                          f"(e.g. {', '.join(names)}).")
    if not items:
        why = listing.skip_summary() or "; ".join(listing.notes[:3])
        raise InputError("no matrices to analyse" + (f" ({why})" if why else "") + ".")
    return items, listing


def run_item(name: str, fp: str, options: dict[str, Any], error: str | None = None) -> dict[str, Any]:
    """One item's JSON line (runs in a worker process)."""
    import warnings

    from spectra_cli.errors import SpectraWarning
    from spectra_cli.run import matrix as api

    if error is not None:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": error}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpectraWarning)  # they are in each line's report
            doc = api.fit(name, **options).to_dict()
    except SpectraError as exc:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": str(exc)}
    except MemoryError:
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": "out of memory while analysing this item (fewer workers, or --max-memory, may help)"}
    except ImportError as exc:  # (a package of spectra's install is missing or broken: the environment's, no bug)
        missing = getattr(exc, "name", None) or str(exc)
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": f"the package {missing!r} that this analysis needs cannot be imported ({exc}); reinstall "
                         "spectra's dependencies (pip install 'spectra-cli') in this environment"}
    except Exception as exc:  # noqa: BLE001 - one broken item must not stop the batch
        return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": name, "fingerprint": fp,
                "error": f"unexpected {type(exc).__name__}: {exc} (a bug; please report it)"}
    doc["item"] = name  # doc["source"]["fingerprint"] comes from the same function on the same input
    return doc


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
    from spectra_cli.jsonio import loads
    from spectra_cli.results import RESULT_SCHEMAS, check_report_schema

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


def _worker_init(threads: int) -> None:
    """Worker initializer: ``threads`` BLAS threads (workers x threads <= cores), and death with the
    parent (Linux), so a killed batch leaves no workers running."""
    for var in ENV_VARS:
        os.environ[var] = str(threads)  # the worker's cap (threads.threads_for respects it)
    if sys.platform.startswith("linux"):
        import contextlib
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    from threadpoolctl import threadpool_limits

    threadpool_limits(threads)


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # fork starts workers in milliseconds (spawn re-imports numpy in each, ~0.5 s); it is the
    # default on Linux and safe here: the parent holds no locks or threads of its own.
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    threads = worker_threads(workers)  # the cores shared out (not the machine's count: its affinity mask)
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                               initializer=_worker_init, initargs=(threads,))


def run_batch(
    items: list[Item], options: dict[str, Any], *, workers: int = 1, engine: str = "local",
    scheduler: str | None = None, on_result: Callable[[dict[str, Any]], None] | None = None,
    connect_timeout: float = 5.0, verbose: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield each item's line as it completes (input order when ``workers == 1``). With
    ``engine="dask"`` the items are Dask tasks (a LocalCluster of ``workers`` processes, or the
    cluster at ``scheduler``); each item is analysed whole on one worker."""
    workers = check_int("workers", workers, minimum=1)
    if check_choice("engine", engine, ENGINES) != "local":
        yield from _run_on_dask(items, options, workers=workers, scheduler=scheduler, on_result=on_result,
                                connect_timeout=connect_timeout, verbose=verbose)
        return
    if workers == 1 or len(items) <= 1:  # (none left, after --resume: no pool to start)
        for it in items:
            doc = run_item(it.name, it.fingerprint, options, it.error)
            if on_result:
                on_result(doc)
            yield doc
        return
    from concurrent.futures.process import BrokenProcessPool

    with _pool(min(workers, len(items))) as ex:
        pending: dict[Future[dict[str, Any]], Item] = {}
        queue = list(items)
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                it = queue.pop(0)
                pending[ex.submit(run_item, it.name, it.fingerprint, options, it.error)] = it
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                it = pending.pop(fut)
                try:
                    docs = [fut.result()]
                except BrokenProcessPool:
                    # The pool can run nothing more: this item and every one not finished fail.
                    docs = [_died(x) for x in (it, *pending.values(), *queue)]
                    pending, queue = {}, []
                for doc in docs:
                    if on_result:
                        on_result(doc)
                    yield doc
                if not pending and not queue:
                    break


def _run_on_dask(items: list[Item], options: dict[str, Any], *, workers: int, scheduler: str | None,
                 on_result: Callable[[dict[str, Any]], None] | None, connect_timeout: float,
                 verbose: bool) -> Iterator[dict[str, Any]]:
    from spectra_cli.stream import cluster as dask_engine

    with dask_engine.client(scheduler, workers if scheduler is None else None, connect_timeout=connect_timeout,
                            verbose=verbose) as c:
        distributed = dask_engine.require_distributed()
        futures = {c.submit(run_item, it.name, it.fingerprint, options, it.error, pure=False): it for it in items}
        for fut in distributed.as_completed(futures):
            try:
                doc = fut.result()
            except Exception as exc:  # noqa: BLE001 - a worker lost for good: this item fails, the batch goes on
                it = futures[fut]
                doc = {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": it.name,
                       "fingerprint": it.fingerprint, "error": f"the Dask task failed: {type(exc).__name__}: {exc}"}
            if on_result:
                on_result(doc)
            yield doc


def _died(it: Item) -> dict[str, Any]:
    return {"schema": ERROR_SCHEMA, "spectra_version": __version__, "item": it.name, "fingerprint": it.fingerprint,
            "error": "a worker process died (out of memory, or killed) before this item finished"}


def expected_options(options: dict[str, Any]) -> dict[str, Any]:
    """The report ``options`` section a line made with ``options`` (keywords of ``fit``) carries."""
    from spectra_cli.analysis.suite import FIT_KEYWORDS, FitOptions
    from spectra_cli.options import ReadOptions

    read = ReadOptions.create(**{k: v for k, v in options.items() if k not in FIT_KEYWORDS})
    fit = FitOptions.create(**{k: v for k, v in options.items() if k in FIT_KEYWORDS})  # (top checked there once)
    return {"options": {**read.to_report(), **fit.to_report()}}


@dataclass
class BatchRun:
    """What :func:`run_to_jsonl` did: the new lines, the items skipped by ``resume``, notes."""

    results: list[dict[str, Any]]
    skipped: int
    notes: list[str]
    option_mismatch: list[str]
    retried: int = 0


def run_to_jsonl(items: list[Item], options: dict[str, Any], *, jsonl: str | None, resume: bool = False,
                 workers: int = 1, engine: str = "local", scheduler: str | None = None,
                 allow_option_mismatch: bool = False, skipped: list[Skip] | None = None,
                 on_result: Callable[[dict[str, Any]], None] | None = None, overwrite: bool = False,
                 connect_timeout: float = 5.0, verbose: bool = False) -> BatchRun:
    """Run the items (skipping, with ``resume``, those already in ``jsonl`` with the same
    fingerprint and options) and append each finished line to ``jsonl`` as it comes. ``skipped``
    tensors get a ``spectra.batch-skipped/1`` line each (once, also across resumes)."""
    if resume and not jsonl:
        raise OptionError(f"{param('resume')} needs {param('jsonl')} FILE (the results to resume from).")
    expected = expected_options(options)
    results: list[dict[str, Any]] = []
    if resume and overwrite:
        raise OptionError(f"{param('resume')} keeps the results already in {param('jsonl')} and {param('overwrite')} "
                          "replaces them: give one.")
    out = ResultsFile(jsonl, resume=resume, inputs=[it.name for it in items], expected=expected,
                      allow_mismatch=allow_option_mismatch, overwrite=overwrite) if jsonl else None
    try:
        done = out.done if out is not None else {}
        todo = [it for it in items if it.fingerprint not in done]
        from spectra_cli.jsonio import dumps

        for sk in skipped or ():
            if sk.fingerprint not in done:
                line = sk.to_dict()
                if out is not None:
                    out.write(dumps(line, indent=None))
                if on_result is not None:
                    on_result(line)
        for doc in run_batch(todo, options, workers=workers, engine=engine, scheduler=scheduler,
                             connect_timeout=connect_timeout, verbose=verbose):
            if out is not None:
                out.write(dumps(doc, indent=None))
            results.append(doc)
            if on_result is not None:
                on_result(doc)
    finally:
        if out is not None:
            out.close()
    notes = out.notes if out is not None else []
    return BatchRun(results, len(items) - len(todo), notes, out.mismatch if out is not None else [],
                    out.retried if out is not None else 0)


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What :func:`batch` did: one JSON line (a report, or a failed item's error) per item run, in
    the order they finished; the tensors skipped (not weight matrices), and why; what ``resume``
    kept; notes. Iterating gives every line: the reports and failed items, then the skipped tensors
    (``.failed``, ``.skipped``); ``summary()`` is the model-level summary of ``spectra batch --summary``;
    ``to_pandas()`` a DataFrame of one flat row per item (WeightWatcher's columns under its convention);
    in Jupyter, a table."""

    results: tuple[dict[str, Any], ...]
    skipped: tuple[dict[str, Any], ...] = ()
    items: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    resumed: int = 0
    option_mismatch: tuple[str, ...] = ()
    jsonl: str | None = None
    skip_note: str | None = None
    retried: int = 0
    convention: str = "spectra"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter((*self.results, *self.skipped))

    def __len__(self) -> int:
        return len(self.results) + len(self.skipped)

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per item: ``item``, ``status`` (ok, failed, skipped), ``why``, ``shape`` and the
        headline report fields by their dotted names; under ``convention="weightwatcher"``, WeightWatcher's
        ``analyze()`` columns, one row per layer it analyses (:mod:`spectra_cli.frames`)."""
        from spectra_cli.frames import batch_rows, ww_rows

        lines = [*self.results, *self.skipped]
        return ww_rows(lines) if self.convention == "weightwatcher" else batch_rows(lines)

    def to_pandas(self, *, skipped: bool = False) -> Any:
        """:meth:`rows` as a pandas DataFrame (pandas is the optional extra ``pandas``): the items analysed
        (and failed), each reported number a numeric column; ``skipped=True`` adds the tensors that are
        not matrices (status ``skipped``, with ``why``)."""
        from spectra_cli.frames import WW_COLUMNS, frame

        rows = self.rows()
        if not skipped:
            rows = [r for r in rows if r.get("status") != "skipped"]
        return frame(rows, WW_COLUMNS if self.convention == "weightwatcher" else None)

    def _repr_html_(self) -> str:
        from spectra_cli.frames import html_table

        rows = self.rows()
        cols = (["longname", "N", "M", "alpha", "alpha_weighted", "log_norm", "log_spectral_norm", "stable_rank",
                 "num_spikes", "mp_softrank", "warning"] if self.convention == "weightwatcher"
                else ["item", "status", "shape", "fit.alpha", "fit.r2", "rank.participation_ratio",
                      "weightwatcher.alpha", "why"])
        return html_table(rows, cols, title=f"spectra batch: {len(self.results)} item(s), {len(self.failed)} "
                                            f"failed, {len(self.skipped)} skipped")

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The lines of items that failed (each with its ``error``)."""
        return [r for r in self.results if "error" in r]

    def summary(self) -> dict[str, Any]:
        """Layers per verdict, the mean and median of each metric (plain and parameter-weighted), the
        worst layers: of every line in ``jsonl`` when there is one (resumed items included), else of
        this run's lines."""
        from spectra_cli.run.summary import read_results, summarize

        lines = read_results([self.jsonl]) if self.jsonl else [*self.skipped, *self.results]
        doc = summarize(lines).to_dict()
        ww = doc.get("weightwatcher_summary")
        if self.convention == "weightwatcher" and ww:  # get_summary()'s keys, at the top as it has them
            doc.update({k: v for k, v in ww.items() if k != "layers"})
        return dict(doc)

    def to_dict(self) -> dict[str, Any]:
        return {"results": list(self.results), "skipped": list(self.skipped), "notes": list(self.notes),
                "resumed": self.resumed, "option_mismatch": list(self.option_mismatch), "jsonl": self.jsonl}


@keywords_checked  # (which also holds threads=N for the whole call: the workers take it as their share)
def batch(
    paths: str | os.PathLike[str] | list[str] | tuple[str, ...],
    *,
    jsonl: str | os.PathLike[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    workers: int = 1,
    tensors: str | None = None,
    centered: bool | None = None,
    ddof: int = 1,
    precision: str = "float64",
    block_rows: int | None = None,
    positions: str | None = None,
    pool: str = "tokens",
    engine: str = "local",
    scheduler: str | None = None,
    connect_timeout: float = 5.0,
    verbose: bool = False,
    allow_option_mismatch: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    threads: int | None = None,
    **fitting: Unpack[FitKeywords],
) -> BatchResult:
    """Analyse many matrices with :func:`spectra_cli.fit`: files, directories and globs; a
    ``.safetensors`` checkpoint (or a sharded folder) gives one item per 2-D tensor (``tensors``: a
    regex on their names), and tensors that are not weight matrices are skipped with the reason.

    ``jsonl``: append each item's JSON line to this file as it finishes (locked while the batch runs;
    never an input, never a file that is not a spectra results file); ``resume``: keep the items
    already there with the same fingerprint and options (a cut last line repaired, failed items
    retried); an existing results file is never replaced silently: give ``resume`` or ``overwrite``.
    ``workers`` processes here, or Dask tasks with ``engine="dask"`` (``connect_timeout``: seconds to
    wait for ``scheduler`` to answer; ``verbose``: Dask's own logs) (``workers`` a
    LocalCluster, or ``scheduler``). Every fit keyword of ``fit`` (``window``, ``method``, ``model``,
    ``density``, ``alpha_range``, ``top``, ``ci``, ``population``, ...: :class:`FitKeywords`) is taken
    as ``fit`` takes it, for every item; so are ``centered``, ``ddof``, ``precision``, ``block_rows``,
    ``positions`` and ``pool``. ``convention="weightwatcher"``: WeightWatcher's ``analyze()``: its layer
    selection (a checkpoint tensor with fewer than 8 or more than 15,000 eigenvalues, or a side above
    50,000, is skipped with the reason), uncentred ``W^T W``, the density exponent, its columns by its names
    (``to_pandas()``) and ``summary()`` as its ``get_summary()``. ``on_result(line)`` is called with each
    line as it comes (skips included), ``progress(items_done, items_total)`` once the items are listed and after each. A
    failed item does not stop the batch: it is a line with ``error``. Paths that are all results
    files (``.jsonl``) are read, not run: the result holds their lines (for ``summary()``). ``threads``:
    BLAS threads of every product here and in each worker (default: the thread policy, each worker's
    share ``cores // workers``)."""
    args = check_paths("paths", paths)
    if jsonl is not None:
        jsonl = check_path("jsonl", jsonl)
    if tensors is not None and not isinstance(tensors, str):
        raise OptionError(f"{param('tensors', tensors, show=True)} must be a string (a regular expression).")
    if resume and not jsonl:
        raise OptionError(f"{param('resume')} needs {param('jsonl')} FILE (the results to resume from).")
    given, centered = resolve_convention(dict(fitting), centered)
    convention = check_fit_keywords(given)["convention"]
    centered = True if centered is None else centered
    results_files = [p for p in args if formats.JSONL.matches(p)]
    if results_files:
        if len(results_files) != len(args):
            raise OptionError("a .jsonl PATH is a results file: give only results files (to summarise them), or "
                              "only matrices.")
        from spectra_cli.run.summary import read_results

        lines = read_results(args)
        made = {str((d.get("options") or {}).get("convention", "spectra")) for d in lines if "options" in d}
        return BatchResult(tuple(d for d in lines if "skipped" not in d), tuple(d for d in lines if "skipped" in d),
                           convention=convention if convention != "spectra" or len(made) != 1 else made.pop())
    items, listing = enumerate_items(args, tensors)
    if convention == "weightwatcher":  # its layer selection (weightwatcher.py layer_supported)
        from spectra_cli.analysis.weightwatcher import ww_skip

        kept = []
        for it in items:
            why = ww_skip(it.shape) if it.shape is not None and len(it.shape) == 2 else None
            if why is None:
                kept.append(it)
            else:
                listing.skipped.append(Skip(it.name, "WeightWatcher-skipped layer", why, it.fingerprint))
        if not kept:
            raise InputError(f"no matrices to analyse: WeightWatcher's rules skip all {len(items)} "
                             f"({listing.skipped[-1].reason}).")
        items = kept
    done = [0]

    def on_line(line: dict[str, Any]) -> None:
        if on_result is not None:
            on_result(line)
        if "skipped" not in line and progress is not None:
            done[0] += 1
            progress(done[0], len(items))

    if progress is not None:
        progress(0, len(items))
    options = dict(centered=centered, ddof=ddof, precision=precision, block_rows=block_rows, **given,
                   **({"positions": positions} if positions is not None else {}),
                   **({"pool": pool} if pool != "tokens" else {}))
    out = os.fspath(jsonl) if jsonl is not None else None
    run = run_to_jsonl(items, options, jsonl=out, resume=resume, workers=workers, engine=engine,
                       scheduler=scheduler, allow_option_mismatch=allow_option_mismatch, skipped=listing.skipped,
                       on_result=on_line, overwrite=overwrite,
                       connect_timeout=check_number("connect_timeout", connect_timeout, positive=True), verbose=verbose)
    return BatchResult(tuple(run.results), tuple(s.to_dict() for s in listing.skipped),
                       tuple(it.name for it in items), tuple([*listing.notes, *run.notes]), run.skipped,
                       tuple(run.option_mismatch), out, listing.skip_summary(), run.retried, convention)
