"""Byte-compile spectra_cli before timing whole processes, as `pip install .` does for a user.

An editable checkout where PYTHONDONTWRITEBYTECODE is set (this sandbox sets it) would otherwise
recompile every module of the package in every process: 0.1-0.15 s per process, a cost that numpy
and the other peers (installed compiled) never pay."""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_package() -> None:
    import spectra_cli

    compileall.compile_dir(Path(spectra_cli.__file__).parent, quiet=1)
