"""The whitening transform's file: an ``.npz`` of plain arrays (never pickled), written atomically and
read as a regular file. What the arrays mean is :class:`spectra_cli.analysis.whitening.WhiteningTransform`'s;
this module only moves them to and from the disk (the analysis floor does no file I/O)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from spectra_cli.errors import InputError, OptionError, param
from spectra_cli.sources import formats
from spectra_cli.version import __version__

#: The arrays every transform file holds (``zeroed`` too since it was added; optional on reading).
TRANSFORM_KEYS = formats.TRANSFORM.members


def is_transform_file(path: str) -> bool:
    """An ``.npz`` archive holding the arrays of a saved transform."""
    import stat
    import zipfile

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False  # a FIFO would block the open
        with zipfile.ZipFile(path) as z:
            names = {n.removesuffix(".npy") for n in z.namelist()}
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return set(TRANSFORM_KEYS) <= names


def check_target(path: str) -> None:
    """Refuse a path a transform may not be written to (not ``.npz``, no directory, an input, another file)."""
    from spectra_cli.sinks import check_replaceable

    if not formats.TRANSFORM.matches(path):
        raise OptionError(f"{param('save_transform', path)}: the file must end in .npz.")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise OptionError(f"{param('save_transform', path)}: directory {parent} does not exist.")
    check_replaceable(path, "save_transform")
    if os.path.lexists(path) and not is_transform_file(path):
        raise OptionError(f"{param('save_transform', path)} exists and is not a spectra transform file; name a "
                          "new file (a transform file of an earlier run is replaced).")


def write(path: str, arrays: dict[str, Any]) -> None:
    """The arrays (strings as unicode arrays) to ``path``, atomically, with this spectra's version."""
    from spectra_cli.sinks import atomic_file

    check_target(path)
    with atomic_file(path, flag="save_transform") as f:
        stored: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
        np.savez(f, **stored, spectra_version=np.array(__version__))


def read(path: str) -> dict[str, np.ndarray]:
    """The arrays of a transform file; an InputError for anything that is not one (never unpickled)."""
    from spectra_cli.sources.base import open_regular

    try:
        with open_regular(path, "transform file") as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise InputError(f"{path} is not a spectra transform (a single array, not an .npz archive; make "
                                 f"one with spectra whiten {param('save_transform')}).")
            missing = [k for k in TRANSFORM_KEYS if k not in z.files]
            if missing:
                raise InputError(f"{path} is not a spectra transform: missing {', '.join(missing)} "
                                 f"(make one with spectra whiten {param('save_transform')}).")
            arrays = {k: z[k] for k in z.files}
            z.close()
    except InputError:
        raise
    except Exception as exc:  # numpy, zipfile and zlib raise their own types on a corrupt archive
        raise InputError(f"cannot read transform {path}: {type(exc).__name__}: {exc}") from None
    return arrays
