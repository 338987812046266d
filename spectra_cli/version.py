"""spectra's version, in a leaf module every floor may import (pyproject.toml reads it too)."""

__version__ = "0.1.0"
