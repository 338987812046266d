"""Pure numpy analyses of a spectrum: power-law fits and effective ranks."""
