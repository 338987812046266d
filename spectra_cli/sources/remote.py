"""Data where it lives: paths that are URLs (``s3://``, ``gs://``, ``hf://``, ``memory://``,
``file://`` ...) are opened through fsspec, with ranged reads (each block is a seek and a read,
never a whole-file download). Credentials come from the environment as fsspec and its backends
read them; spectra stores and prints none. fsspec comes with the ``dask``, ``hf`` and ``s3`` extras;
``hf`` brings huggingface_hub (``hf://org/model``: a Hub repository, read as a local folder is), ``s3``
brings s3fs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from spectra_cli.errors import InputError, OptionError, SpectraError

#: The extra that brings each protocol's fsspec backend.
EXTRAS = {"hf": "hf", "s3": "s3", "s3a": "s3"}
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def is_url(path: str) -> bool:
    return bool(_URL.match(path))


def is_glob_url(url: str) -> bool:
    """A URL with a wildcard after its scheme (``s3://bucket/part-*.parquet``)."""
    return any(ch in url.split("://", 1)[1] for ch in "*?[")


def filesystem(url: str) -> tuple[Any, str]:
    """``(fsspec filesystem, path inside it)``."""
    try:
        import fsspec
    except ImportError:
        raise OptionError(f"{url} is a URL: reading it needs fsspec (pip install fsspec, and the protocol's "
                          "backend such as s3fs or gcsfs; the 'dask' extra brings fsspec).") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        extra = EXTRAS.get(url.split("://", 1)[0].lower())
        hint = (f" (the backend comes with the extra '{extra}': pip install 'spectra-geometry[{extra}]')"
                if extra and isinstance(exc, ImportError) else "")
        raise OptionError(f"cannot open {url}: {exc}{hint}") from None


@contextmanager
def reaching(url: str, *, keep: tuple[type[BaseException], ...] = (OSError,)) -> Iterator[None]:
    """A backend's own failure inside (no network, a refused connection, bad credentials: whatever it
    raises) as one input error naming the URL; spectra's errors, and ``keep``, pass through."""
    try:
        yield
    except SpectraError:
        raise
    except keep:
        raise
    except Exception as exc:  # noqa: BLE001 - the backend's exception types are its own
        text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise InputError(f"cannot reach {url}: {type(exc).__name__}{': ' + text if text else ''}") from None


def open_url(url: str) -> IO[bytes]:
    fs, path = filesystem(url)
    try:
        with reaching(url):
            if fs.isdir(path):
                raise InputError(f"{url} is a directory; a file is required.")
            return fs.open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"no such file or directory: {url}") from None
    except OSError as exc:
        raise InputError(f"cannot open {url}: {exc}") from None


def exists(url: str) -> bool:
    fs, path = filesystem(url)
    try:
        with reaching(url):
            return bool(fs.exists(path))
    except OSError:
        return False


def isdir(url: str) -> bool:
    fs, path = filesystem(url)
    try:
        with reaching(url):
            return bool(fs.isdir(path))
    except OSError:
        return False


def _join(url: str, path: str) -> str:
    protocol = url.split("://", 1)[0]
    return f"{protocol}://{path.lstrip('/') if protocol != 'file' else path}"


def find(url: str, suffixes: tuple[str, ...]) -> list[str]:
    """Files below a directory URL (names starting with ``_`` or ``.`` left out, as locally)."""
    fs, path = filesystem(url)
    out = []
    with reaching(url, keep=()):
        listed = fs.find(path)
    for p in listed:
        parts = p[len(path.rstrip("/")):].strip("/").split("/")
        if any(part.startswith((".", "_")) for part in parts):
            continue
        if p.lower().endswith(suffixes):
            out.append(_join(url, p))
    return sorted(out)


def glob(url: str) -> list[str]:
    fs, path = filesystem(url)
    with reaching(url, keep=()):
        return sorted(_join(url, p) for p in fs.glob(path) if fs.isfile(p))


def size(f: Any) -> int:
    """The size of an open file (a real file's fstat, or an fsspec file's own size)."""
    import os

    try:
        return os.fstat(f.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        pass
    if getattr(f, "size", None) is not None:
        return int(f.size)
    pos = f.tell()
    end = f.seek(0, 2)
    f.seek(pos)
    return int(end)


def identity(url: str) -> str:
    """What the fingerprint of a URL covers: its size and modification time where the store says."""
    fs, path = filesystem(url)
    try:
        info = fs.info(path)
    except (OSError, FileNotFoundError):
        return url
    stamp = info.get("mtime") or info.get("LastModified") or info.get("updated") or info.get("created") or ""
    return f"{url}|{info.get('size')}|{stamp}"
