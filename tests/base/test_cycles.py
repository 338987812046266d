"""A fit leaves no reference cycle through its frames: such a cycle keeps every local of the call (the d x d moments,
the rows) until Python's cyclic collector happens to run, which in a batch worker held 1.8 GB at d = 4,096."""

from __future__ import annotations

import gc
import types
import warnings

import numpy as np

from spectra_cli.run import matrix as api


def test_a_fit_that_warns_leaves_no_frame_in_a_reference_cycle():
    X = np.random.default_rng(0).standard_normal((60, 40))  # (n/d < 10: the fit warns)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            api.fit(X)
        gc.collect()
        # (spectra's own frames: another thread of the test process, xdist's or a timer's, may leave its own)
        frames = [o.f_code.co_name for o in gc.garbage
                  if isinstance(o, types.FrameType) and "spectra_cli" in o.f_code.co_filename]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert caught  # (the path under test: warnings emitted at the caller's line)
    assert frames == []
