"""Passes over the rows and every mergeable state: moments, the local and Dask passes, the
Accumulator and moment files."""
