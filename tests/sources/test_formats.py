"""The registry of file formats: one entry per format, every lookup consistent with the entries,
every reader and writer it names importable, every extension the documentation lists known."""

from __future__ import annotations

import importlib
import re

import pytest

from spectra_cli.sources import formats
from tests.conftest import ROOT


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:  # a class's method: module.Class.method
        module, _, cls = module.rpartition(".")
        return getattr(getattr(importlib.import_module(module), cls), name)


def test_every_format_is_declared_once_with_well_formed_fields():
    names = [f.name for f in formats.FORMATS]
    assert len(names) == len(set(names))
    assert set(formats.DATA) | set(formats.MATRIX_OUTPUTS) | set(formats.FIGURES) <= set(formats.FORMATS)
    for f in formats.FORMATS:
        assert f.extensions and all(re.fullmatch(r"\.[a-z0-9]+", e) for e in f.extensions), f.name
        assert f.extension == f.extensions[0] and f.kind in formats.KINDS
        assert f.a_file.startswith(("a ", "an ")), f.name
        assert all(isinstance(m, bytes) and m for m in f.magic), f.name
        assert formats.by_name(f.name) is f


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_what_reads_and_writes_each_format_exists(fmt):
    for dotted in (fmt.source, fmt.sink):
        if dotted is not None:
            assert callable(_resolve(dotted)), dotted


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=lambda f: f.name)
def test_a_name_finds_its_format_in_any_case_and_the_first_bytes_find_it_too(fmt):
    for ext in fmt.extensions:
        found = formats.by_path(f"dir.npy/x{ext}")  # (the folder's name plays no part)
        assert found is not None and ext in found.extensions
        assert formats.by_path(f"X{ext.upper()}") is found
        assert found is fmt or found is formats.NPZ  # the archives told apart by members are .npz by name
    for magic in fmt.magic:
        found = formats.by_magic(magic + b"\x00rest")
        assert found is not None and found.magic == fmt.magic
    assert formats.by_path("x.npy.txt") is formats.CSV and formats.by_path("notes") is None
    assert formats.by_magic(b'{"schema": "spectra.fit/1"}') is None


def test_archives_told_apart_by_members_share_the_npz_name_and_magic():
    told_by_members = [f for f in formats.FORMATS if f.members]
    assert {f.name for f in told_by_members} == {"moments", "transform"}
    for f in told_by_members:
        assert f.extensions == formats.NPZ.extensions and f.magic == formats.NPZ.magic
    assert formats.extensions(*formats.DATA) == (".npy", ".npz", ".parquet", ".pq", ".safetensors")


def test_the_registry_knows_every_extension_the_inputs_page_lists():
    text = (ROOT / "docs" / "inputs.md").read_text()
    listed = set(re.findall(r"(?<![\w./])(\.[a-z][a-z0-9]{1,11})\b", text))
    assert {".npy", ".npz", ".safetensors"} <= listed
    known = set(formats.extensions(*formats.FORMATS))
    assert listed <= known, f"docs/inputs.md lists {sorted(listed - known)}, which the registry does not know"
    for f in formats.DATA:  # and the page describes every data format spectra reads
        assert f.name.lower() in text.lower(), f.name
