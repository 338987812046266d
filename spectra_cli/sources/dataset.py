"""Every path a user names, resolved once: a :class:`Dataset`.

A command takes one or more PATH arguments (``spectra fit m0.npz m1.npz``, or what the shell makes
of ``m*.npz``), each a file, a directory, a glob (quoted, expanded here for every format) or a
``file::name`` tensor. :func:`resolve` expands them into the files behind them (the *members*),
each identified by its (device, inode): the same file named twice (a symbolic or hard link, a glob
that overlaps another argument) is an error naming both paths. The members then decide what the
input is, by one rule for every format:

- moment files (``.npz`` written by ``spectra moments``): merged exactly;
- ``.npy`` files: one matrix, their rows in the order given (a glob's matches sorted), as a
  directory of shards is;
- Parquet files: one dataset, as a directory of them is;
- a single ``.npz``, ``.safetensors`` or ``file::name``: that file.

The report's ``source`` lists every member with its own fingerprint; the dataset's fingerprint is
the member's own when there is one, else a hash of that list; ``files`` is their count. Outputs
are checked against the members by inode (:func:`spectra_cli.sinks.check_not_input`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from spectra_cli.errors import InputError
from spectra_cli.sources import formats, remote
from spectra_cli.sources.base import check_regular, expand_glob, fingerprint, identity, is_glob
from spectra_cli.validate import check_paths

#: The members a moment file holds (``format``, ``meta`` and the moments' ``m2``).
MOMENT_MEMBERS = frozenset(f"{m}.npy" for m in formats.MOMENTS.members)


@dataclass(frozen=True, slots=True)
class Member:
    """One file behind the paths a user named."""

    path: str
    identity: tuple[int, int] | None  # (device, inode); None for a URL

    def fingerprint(self) -> str:
        return fingerprint(self.path)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "fingerprint": self.fingerprint()}


@dataclass(frozen=True, slots=True)
class Dataset:
    """The resolved input: ``arguments`` as given, ``members`` the files behind them, ``kind`` what
    they are read as (``moments``, ``npy``, ``parquet`` or ``single``: one path read by its own
    reader), ``name`` what reports call it."""

    arguments: tuple[str, ...]
    members: tuple[Member, ...]
    kind: str
    name: str

    @property
    def is_moments(self) -> bool:
        return self.kind == "moments"

    def member_paths(self) -> list[str]:
        return [m.path for m in self.members]

    def fingerprint(self) -> str:
        """The member's fingerprint when there is one; else a hash of the list of the members'
        fingerprints, in order (each is of the file's real path, size and modification time: a missing,
        added or changed shard changes it, the spelling of the paths does not)."""
        if len(self.members) == 1:
            return self.members[0].fingerprint()
        h = hashlib.sha256()
        for m in self.members:  # each member's fingerprint names its real path: spelling does not matter
            h.update(f"{m.fingerprint()};".encode())
        return h.hexdigest()[:16]

    def members_report(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.members]

    def guarded_paths(self) -> list[str]:
        """What an output must never be: every member, and every directory argument (a Parquet
        file written inside one would join the dataset)."""
        return [*self.arguments, *self.member_paths()]


def _directory_files(path: str) -> list[str]:
    """The data files of a directory: its Parquet files or its ``.npy`` shards (``_``- and ``.``-names
    skipped, as Spark, Dask and pyarrow skip them; subdirectories walked, links to directories not
    followed), in path order. A name of either kind that is not a regular file (a FIFO, a dangling
    link) is kept, so that its reader refuses it by name rather than its rows being left out."""
    found: dict[str, list[str]] = {"parquet": [], "npy": []}
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for n in names:
            if n.startswith((".", "_")):
                continue
            fmt = formats.by_path(n, (formats.PARQUET, formats.NPY))
            if fmt is not None:
                found[fmt.name].append(os.path.join(root, n))
    if found["parquet"] and found["npy"]:
        raise InputError(f"directory {path} holds both Parquet files ({found['parquet'][0]}) and .npy shards "
                         f"({found['npy'][0]}); name the ones to read (a glob such as {path}/*.npy).")
    return sorted(found["parquet"] or found["npy"])


def is_moment_file(path: str) -> bool:
    """An ``.npz`` written by :meth:`Accumulator.save` (it holds ``format``, ``meta`` and ``m2``)."""
    return moment_file_problem(path) is None


def moment_file_problem(path: str) -> str | None:
    """Why ``path`` is not a readable moment file (None when it is one)."""
    if not formats.MOMENTS.matches(path):
        return "not an .npz archive"
    if not os.path.isfile(path):
        return "not a regular file"
    from spectra_cli.sources.npy import open_zip  # cached: the reader opens the same archive next

    try:
        names = set(open_zip(path).namelist())
    except InputError as exc:
        return str(exc).removeprefix(f"{path}: ").rstrip(".")
    missing = sorted(MOMENT_MEMBERS - names)
    if missing:
        return f"an .npz archive without the members {', '.join(m[:-4] for m in missing)} of a moment file"
    return None


def _kind_of(path: str) -> str:
    """The data format a member's name says (``npy``, ``npz``, ``parquet``, ``safetensors``), or its
    extension when it is none of them."""
    fmt = formats.by_path(path, formats.DATA)
    return fmt.name if fmt is not None else os.path.splitext(path)[1] or "(no extension)"


def _a_file(kind: str) -> str:
    fmt = formats.by_name(kind)
    return fmt.a_file if fmt is not None else f"a file of extension {kind}"


def resolve(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> Dataset:
    """The :class:`Dataset` that one or more paths name (see the module docstring)."""
    if isinstance(paths, list | tuple) and not paths:
        raise InputError("no input path given; name at least one file, directory or glob.")
    args = tuple(check_paths("data", paths))
    name = args[0] if len(args) == 1 else ",".join(args)
    if len(args) == 1 and remote.is_url(args[0]):
        return Dataset(args, (Member(args[0], None),), "single", name)
    tensors = [a for a in args if "::" in a and not os.path.lexists(a)]  # an existing file of that name is a file
    if tensors:
        if len(args) > 1:
            raise InputError(f"{tensors[0]} names one tensor; give it as the only PATH (spectra batch analyses "
                             "several).")
        file = args[0].partition("::")[0]
        if not os.path.exists(file):
            raise InputError(f"no such file or directory: {file}")
        return Dataset(args, (Member(args[0], identity(file)),), "single", name)  # its fingerprint names the tensor
    files: list[str] = []
    for a in args:
        if remote.is_url(a):
            raise InputError(f"{a} is a URL; a URL is read as the only PATH (a glob or a directory URL names "
                             "several files).")
        if is_glob(a):
            files += expand_glob(a)
        elif os.path.isdir(a):
            inside = _directory_files(a)
            if not inside:
                raise InputError(f"directory {a} holds no .parquet or .npy files.")
            files += inside
        elif not os.path.lexists(a):
            raise InputError(f"no such file or directory: {a}")
        else:
            check_regular(a)
            files.append(a)
    members = _distinct(files)
    return Dataset(args, members, _classify(members, args), name)


def _distinct(files: list[str]) -> tuple[Member, ...]:
    seen: dict[tuple[int, int], str] = {}
    out: list[Member] = []
    for f in files:
        ident = identity(f)
        if ident is None:
            raise InputError(f"no such file or directory: {f}")
        if ident in seen and seen[ident] == f:
            raise InputError(f"{f} is named twice (by a glob or a directory and by name, or twice by name); name each "
                             "input once.")
        if ident in seen:
            raise InputError(f"{f} and {seen[ident]} are the same file (device {ident[0]}, inode {ident[1]}); "
                             "name each input once.")
        seen[ident] = f
        out.append(Member(f, ident))
    return tuple(out)


def _classify(members: tuple[Member, ...], args: tuple[str, ...]) -> str:
    paths = [m.path for m in members]
    kinds = [_kind_of(p) for p in paths]
    if all(k == "npz" for k in kinds):
        problems = [(p, moment_file_problem(p)) for p in paths]
        if all(why is None for _, why in problems):
            return "moments"
        if len(paths) == 1:
            return "single"  # an .npz of arrays: its own reader
        good = [p for p, why in problems if why is None]
        bad, why = next((p, why) for p, why in problems if why is not None)
        beside = f" (beside the moment file {good[0]})" if good else ""
        raise InputError(f"{bad} is not a spectra moment file ({why}){beside}; several .npz inputs are merged "
                         "as moment files, and each must be one.")
    if len(paths) == 1:
        kind = kinds[0]
        single_arg_dir = len(args) == 1 and os.path.isdir(args[0])
        return kind if kind in ("npy", "parquet") and (single_arg_dir or is_glob(args[0])) else "single"
    first = kinds[0]
    for p, k in zip(paths, kinds, strict=True):
        if k != first:
            raise InputError(f"{p} is {_a_file(k)} and {paths[0]} {_a_file(first)}; the files of one input must be "
                             "all .npy shards, all Parquet files or all moment files.")
    if first not in ("npy", "parquet"):
        raise InputError(f"{paths[1]} is {_a_file(first)}; several inputs are read as one matrix only when they are "
                         "all .npy shards, all Parquet files or all moment files.")
    return first

