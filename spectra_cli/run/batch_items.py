"""What a batch runs: its PATHs (files, directories, globs, URLs) listed as items, one per matrix.

A ``.safetensors`` checkpoint (or a sharded folder) gives one :class:`Item` per 2-D tensor, an
``.npz`` archive one per array; what is not a weight matrix (a vector, an integer buffer) is a
:class:`Skip` with the reason, and what cannot be read at all a note of the :class:`Listing`. A file
whose header cannot even be listed becomes one failed item, not a failed batch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from spectra_cli.documents import SKIP_SCHEMA
from spectra_cli.errors import InputError, OptionError, SpectraError, param
from spectra_cli.sources import formats
from spectra_cli.sources.base import expand_glob, fingerprint, is_glob
from spectra_cli.sources.dataset import is_moment_file
from spectra_cli.validate import Pattern, check_regex
from spectra_cli.version import __version__

#: The kinds of skip of a batch of changes (``--base``): a layer the base lacks, or holds in another shape, or a kernel.
BASE_KINDS = ("layer not in the base", "reshaped layer", "convolution kernel")
#: ... and of an adapter's layers that are not read.
ADAPTER_KINDS = ("convolution LoRA", "incomplete adapter", "change with a side < 2")
#: The data files of a folder besides its checkpoint's shards (those are listed by the safetensors reader).
FOLDER_FORMATS = (formats.NPY, formats.NPZ, formats.PARQUET)


@dataclass(frozen=True, slots=True)
class Item:
    name: str  # what open_source takes: a path, path::tensor or path::key
    fingerprint: str
    error: str | None = None  # the file could not even be listed: the item fails with this
    shape: tuple[int, ...] | None = None  # a checkpoint tensor's, from its header
    base: str | None = None  # the base checkpoint's tensor of the same name: the item is the change W - W_base
    adapter: Any = None  # an adapted layer of a LoRA adapter (spectra_cli.sources.adapter.AdapterLayer)
    dtype: str | None = None  # a checkpoint tensor's, from its header (BF16, F16, F32, F64)


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
        parts = [f"{n} {kind if n == 1 else _plural(kind)}"
                 for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        whys = []
        if set(counts) - set(BASE_KINDS) - set(ADAPTER_KINDS) - {"WeightWatcher-skipped layer"}:
            whys.append("not weight matrices")
        if set(counts) & set(ADAPTER_KINDS):
            whys.append("adapted layers not read")
        if "WeightWatcher-skipped layer" in counts:
            whys.append("layers WeightWatcher skips")
        if set(counts) & set(BASE_KINDS):
            whys.append("no counterpart in the base")
        return "skipped " + ", ".join(parts) + f" ({', or '.join(whys)}; --verbose lists them)"


def _plural(kind: str) -> str:
    """``vector`` -> ``vectors``, ``tensor of 3+ dimensions`` -> ``tensors of 3+ dimensions``, ``layer not in the
    base`` -> ``layers not in the base``, ``matrix with a side < 2`` -> ``matrices with a side < 2``."""
    words = kind.split(" ")
    at = next((i - 1 for i, w in enumerate(words) if w in ("of", "not", "with") and i > 0), len(words) - 1)
    w = words[at]
    words[at] = w[:-1] + "ces" if w.endswith("ix") else w if w.endswith("s") else w + "s"
    return " ".join(words)


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
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for f in files:
            ext = os.path.splitext(f)[1].lower() or "(no extension)"
            if not os.path.isfile(os.path.join(root, f)):  # (a FIFO, a device, a dangling link: not a file)
                ext = f"{ext} that is not a regular file"
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


def _listing(f: str, pattern: Pattern | None, listing: Listing, counts: list[int], kernels: bool = False) -> list[Item]:
    """The items of one file: each 2-D tensor of a checkpoint (and 4-D kernel, with ``kernels``), each array of an
    archive, or the file."""
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
            if why is not None and kernels and len(t["shape"]) == 4 and why[0] == "tensor of 3+ dimensions":
                why = None  # (a convolution's kernel: its slices, in WeightWatcher's convention)
            if why is not None:
                listing.skipped.append(Skip(name, why[0], why[1], fingerprint(name)))
                continue
            out.append(Item(name, fingerprint(name), shape=tuple(int(x) for x in t["shape"]), dtype=str(t["dtype"])))
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


def enumerate_items(paths: list[str], tensors: str | None = None, *,
                    kernels: bool = False) -> tuple[list[Item], Listing]:
    """Items in a stable order, and what was skipped (vectors, integer buffers, ...) with notes. A file
    that cannot be listed (a corrupt checkpoint header) becomes one failed item, not a failed batch. ``kernels``:
    a checkpoint's 4-D convolution kernels are items too (WeightWatcher's convention reads their slices)."""
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
                found = _listing(f, pattern, listing, counts, kernels)
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


def _layer_key(name: str) -> str:
    """The name a layer is matched by across two checkpoints: a tensor's or an archive's array name, else the
    file's name."""
    file, _, inner = name.partition("::")
    return inner or os.path.basename(file)


def _file_identity(name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(name.partition("::")[0])
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _base_index(base: str, tensors: str | None, items: list[Item]) -> tuple[list[Item], Listing, dict[str, Item]]:
    """The base checkpoint's matrices by name, checked: every file of it readable (its own error, said), no file of
    the fine-tune's among them, and no name held by two of its files (which one is the base would be unknown)."""
    base_items, base_listing = enumerate_items([base], tensors, kernels=True)
    broken = [b for b in base_items if b.error is not None]
    if broken:
        raise InputError(f"the base {base} cannot be read: {broken[0].error}")
    mine = {i for i in (_file_identity(it.name) for it in items) if i is not None}
    by_key: dict[str, Item] = {}
    for found in base_items:
        if _file_identity(found.name) in mine:
            raise InputError(f"the base {base} holds {found.name.partition('::')[0]}, a file of the fine-tune itself; "
                             "give the base's own files.")
        key = _layer_key(found.name)
        if key in by_key:
            first = by_key[key].name.partition("::")[0]
            raise InputError(f"the base {base} holds tensor {key!r} twice ({first} and {found.name.partition('::')[0]}"
                             "); which one is the base is unknown: give one checkpoint.")
        by_key[key] = found
    return base_items, base_listing, by_key


def _counterpart(by_key: dict[str, Item], key: str) -> tuple[Item | None, str]:
    """The base's item of the name ``key``, or else of the one name that ends with it (or that it ends with) at a
    dot; and the name found (``key`` itself when none)."""
    if key in by_key:
        return by_key[key], key
    near = [k for k in by_key if k.endswith("." + key) or key.endswith("." + k)]
    return (by_key[near[0]], near[0]) if len(near) == 1 else (None, key)


def match_base(items: list[Item], base: str, tensors: str | None, listing: Listing) -> list[Item]:
    """The items paired with the base checkpoint's tensor of the same name (``--base``): each becomes the change
    ``W - W_base``. Names match exactly, or else by a unique dotted suffix (``bert.encoder.layer.0...`` against
    ``encoder.layer.0...``: said in a note); an item with no counterpart, or with another shape, is skipped with the
    reason, and the base's tensors left over are counted in a note."""
    from spectra_cli.sources.change import Change

    base_items, base_listing, by_key = _base_index(base, tensors, items)
    used: set[str] = set()
    out: list[Item] = []
    suffixed: list[str] = []
    for it in items:
        if it.error is not None:  # (a fine-tune file that cannot be read: its own error, not "not in the base")
            out.append(it)
            continue
        if it.shape is not None and len(it.shape) == 4:
            listing.skipped.append(Skip(it.name, "convolution kernel", "a convolution kernel's change is not read "
                                        "with --base (each of its slices would be a change); analyse the two "
                                        "checkpoints apart", it.fingerprint))
            continue
        key = _layer_key(it.name)
        b, found = _counterpart(by_key, key)
        if b is not None and found != key:
            suffixed.append(f"{key} -> {found}")
        if b is None:
            listing.skipped.append(Skip(it.name, BASE_KINDS[0], f"the base {base} has no tensor {key!r}",
                                        it.fingerprint))
            continue
        used.add(b.name)
        if it.shape is not None and b.shape is not None and it.shape != b.shape:
            listing.skipped.append(Skip(it.name, BASE_KINDS[1], f"shape {list(it.shape)} here, {list(b.shape)} in "
                                        f"the base ({b.name}): no change to analyse", it.fingerprint))
            continue
        out.append(Item(it.name, Change(it.name, b.name).fingerprint(), None, it.shape, b.name, dtype="F64"))
    if suffixed:
        listing.notes.append(f"matched {len(suffixed)} layer(s) to the base by their names' ending (e.g. "
                             f"{suffixed[0]})")
    left = [x.name for x in base_items if x.name not in used and not (x.shape is not None and len(x.shape) == 4)]
    if left:
        listing.notes.append(f"{len(left)} matrix(es) of the base have no layer of the same name here (e.g. "
                             f"{_layer_key(left[0])}); not analysed")
    listing.notes.extend(base_listing.notes)
    if not out:
        why = listing.skipped[-1].reason if listing.skipped else "nothing matched"
        raise InputError(f"no layer matches one of the base {base} ({why}).")
    return out


def adapter_items(paths: list[str], base: str | None, tensors: str | None) -> tuple[list[Item], Listing]:
    """The adapted layers of PEFT LoRA adapter folders (``tensors``: a regex on the modules' names), each paired,
    with ``base``, with the base checkpoint's ``<module>.weight`` (matched as :func:`match_base` matches: exactly,
    or by a unique dotted ending), whose shape must be the change's."""
    from dataclasses import replace

    from spectra_cli.sources.adapter import read_adapter

    pattern = check_regex("tensors", tensors) if tensors else None
    listing = Listing([], [])
    items: list[Item] = []
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        st = os.stat(path)
        if (st.st_dev, st.st_ino) in seen:
            listing.notes.append(f"skipped {path}: the same folder as {seen[(st.st_dev, st.st_ino)]}, analysed once")
            continue
        seen[(st.st_dev, st.st_ino)] = path
        adapter = read_adapter(path)
        listing.notes.extend(adapter.notes)
        for module, kind, reason in adapter.skipped:
            name = f"{path}::{module}"
            listing.skipped.append(Skip(name, kind, reason, fingerprint(name)))
        for layer in adapter.layers:
            if pattern is None or pattern.search(layer.module):
                items.append(Item(layer.name, layer.fingerprint(), shape=layer.shape, adapter=layer))
    if pattern is not None and not items:
        raise OptionError(f"{param('tensors', tensors)} matches none of the adapted modules.")
    if any(it.adapter.dora for it in items) and base is None:
        raise OptionError(f"a DoRA adapter's change depends on the base weights (each output row of W + s B A is "
                          f"rescaled to its learned magnitude): give the base checkpoint with {param('base')}.")
    if base is None:
        return items, listing
    base_items, base_listing, by_key = _base_index(base, None, items)
    out = []
    for it in items:
        key = it.adapter.module + ".weight"
        b, _ = _counterpart(by_key, key)
        if b is None:
            listing.skipped.append(Skip(it.name, BASE_KINDS[0], f"the base {base} has no tensor {key!r}",
                                        it.fingerprint))
            continue
        if b.shape is not None and tuple(b.shape) != tuple(it.adapter.shape):
            listing.skipped.append(Skip(it.name, BASE_KINDS[1], f"the adapter changes a {it.adapter.shape[0]} x "
                                        f"{it.adapter.shape[1]} layer ({it.adapter.kind}), but the base's {b.name} "
                                        f"has shape {list(b.shape)}", it.fingerprint))
            continue
        layer = replace(it.adapter, base=b.name)
        out.append(Item(it.name, layer.fingerprint(), shape=it.shape, adapter=layer))
    listing.notes.extend(base_listing.notes)
    if not out:
        why = listing.skipped[-1].reason if listing.skipped else "nothing matched"
        raise InputError(f"no adapted layer matches one of the base {base} ({why}).")
    return out, listing
