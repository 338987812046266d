"""Renderers: rich tables for terminals, strict JSON for pipes."""
