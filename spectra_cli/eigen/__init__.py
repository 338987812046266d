"""Eigenvalues of the accumulated matrix: the full decomposition with its floors, and the
top-k route (block Lanczos)."""
