"""``spectra capture``: the activations of a model's modules, streamed into moment files as the model runs.

:func:`capture` installs the hooks (:class:`spectra_cli.stream.hooks.Capture`) on a ``torch.nn.Module``;
with ``texts=`` it also loads a local Hugging Face model folder (transformers; no network) and feeds it the
texts of a file itself, in batches, and with ``out=`` saves one moment file per module.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from spectra_cli.errors import InputError, OptionError, OutputError, SpectraError, param
from spectra_cli.sources import formats
from spectra_cli.stages import reports_progress, stage
from spectra_cli.stream.hooks import Capture
from spectra_cli.validate import check_int, check_path

#: A text longer than this many characters is cut to it before tokenising (the tokenizer keeps max_length tokens).
MAX_TEXT_CHARS = 100_000


@reports_progress
def capture(model: Any, *, modules: str, groups: int = 0, precision: str = "float32",
            mask: str | Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = "auto",
            output: str | int | None = None, positions: str | None = None, drop_nonfinite: bool = False,
            weights: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None,
            texts: str | os.PathLike[str] | None = None, out: str | os.PathLike[str] | None = None,
            step: int | None = None, batch_size: int = 32, max_length: int = 512, max_tokens: int | None = None,
            column: str = "text", device: str = "cpu",
            progress: Callable[[int, int], None] | None = None) -> Capture:
    """Stream the outputs of a model's modules into mergeable moments, one set per module.

    Parameters
    ----------
    model : torch.nn.Module or path
        The model whose modules are hooked; with ``texts``, a local Hugging Face model folder may be given
        instead (loaded with transformers, ``local_files_only``).
    modules : str
        Which modules: a glob of qualified names (``*`` one dotted part: ``encoder.layer.*``), or a regular
        expression searched in them (``r"encoder\\.layer\\.\\d+$"``).
    groups : int
        Row groups kept for ``fit(..., ci=True)`` and ``population=True``'s sampling curve (32 for both; each a
        ``d x d`` matrix on the device). Call ``i`` of the model goes to group ``i mod groups``.
    precision : str
        ``float32`` (the default) products, each block's added in float64: 1.07x the forward pass of a 384-wide
        model on a CPU, against 1.18x for ``float64`` products (``bench/bench_capture.py``); the reports state the
        floor that follows (``d eps_32 lambda_1``). ``float64`` for moments equal to the host's to 1e-12.
    mask : "auto", None or callable
        The rows: positions whose attention mask is non-zero; ``"auto"`` reads the model call's
        ``attention_mask`` keyword, a callable gets the call's ``(args, kwargs)``; None keeps every position.
    output : str or int, optional
        The tensor of a module's output to take (an attribute or index); default: the output, the first element
        of a tuple, or ``last_hidden_state``.
    positions : str, optional
        Only these positions of a ``(batch, positions, d)`` output, ``"K1:K2"`` (``"1:"`` leaves out CLS).
    drop_nonfinite : bool
        Leave out rows with NaN or infinite values (counted) instead of refusing them.
    weights : callable, optional
        Each token's weight (a count, a probability), a function of the model call's ``(args, kwargs)`` that returns
        a tensor shaped like the attention mask (finite, >= 0): the moments are then the weighted covariance
        ``E^T (diag p - p p^T) E``, ``p = w / sum w``, as ``fit(..., weights=)`` computes it.
    texts : path, optional
        Run the model over these texts: a ``.txt`` file (one text a line), ``.jsonl`` (the ``column`` field) or
        Parquet (the ``column`` column), ``batch_size`` at a time, each cut to ``max_length`` tokens, until
        ``max_tokens`` (non-padding) tokens.
    out : path, optional
        With ``texts``: save the moment files here (:meth:`Capture.save`; ``step`` as there).
    step : int, optional
        With ``out``: the snapshot's step (``out/step_<step>/<module>.npz``).
    batch_size, max_length, max_tokens : int
        See ``texts``.
    column : str
        The text field of a ``.jsonl`` or the text column of a Parquet file.
    device : str
        With ``texts``: the torch device the model runs on (``cpu``, ``cuda``, ``cuda:1``, ...).
    progress : callable, optional
        ``progress(done, total)`` over the texts.

    Returns
    -------
    Capture
        Its hooks installed (use it as a context manager), or, with ``texts``, already removed; ``cap[name]`` is a
        module's :class:`~spectra_cli.stream.accumulator.Accumulator`, ``cap.saved`` the files written.
    """
    options: dict[str, Any] = {"modules": modules, "groups": groups, "precision": precision, "mask": mask,
                               "output": output, "positions": positions, "drop_nonfinite": drop_nonfinite,
                               "weights": weights}
    if texts is None:
        for name, value in (("out", out), ("step", step), ("max_tokens", max_tokens)):
            if value is not None:
                raise OptionError(f"{param(name)} is for a capture that runs the model over {param('texts')}.")
        return Capture(model, **options)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    max_length = check_int("max_length", max_length, minimum=2)
    if max_tokens is not None:
        max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    texts = check_path("texts", texts)
    if not os.path.isfile(texts):  # (before the model is loaded)
        raise InputError(f"{param('texts', texts)} is not a file.")
    if out is not None:
        out = check_path("out", out)
        if os.path.lexists(out) and not os.path.isdir(out):
            raise OutputError(f"{param('out', out)} exists and is not a directory; name a folder for the moment files "
                              "(it is made when missing).")
    net, tokenizer, max_length = _load(model, device, max_length)
    cap = Capture(net, **options)
    try:
        _run(cap, net, tokenizer, _texts(texts, column), batch_size=batch_size, max_length=max_length,
             max_tokens=max_tokens, total=_count(texts))
    finally:
        cap.close()
    if out is not None:
        cap.save(out, step=step)
    return cap


def _load(model: Any, device: str, max_length: int) -> tuple[Any, Any, int]:
    """The model (eval mode, on ``device``), its tokenizer (padding with its end-of-sequence token where it has
    no padding token) and the tokens a text may keep (``max_length``, at most the model's positions), from a
    local folder; a module given as it is needs a tokenizer in its folder, so only a path is accepted with
    ``texts``."""
    if not isinstance(model, str | os.PathLike):
        raise OptionError(f"{param('texts')} runs a model loaded from a local Hugging Face folder: give its path as "
                          f"{param('model')} (with a module, run it yourself inside the capture).")
    path = check_path("model", model)
    if not os.path.isdir(path):
        raise InputError(f"{path} is not a folder; a local Hugging Face model folder (config.json, the weights and "
                         "the tokenizer's files) is required.")
    try:
        import torch
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        raise InputError("spectra capture MODEL_DIR needs PyTorch and transformers: pip install "
                         "'spectra-cli[capture]'.") from None
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # (its advice and its loading bar would go to stderr)
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        net = AutoModel.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot read
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: transformers cannot load a model and tokenizer from it ({first[:300]}).") from None
    cfg = getattr(net, "config", None)
    if getattr(cfg, "is_encoder_decoder", False):
        raise InputError(f"{path} holds an encoder-decoder model ({type(net).__name__}): spectra capture runs "
                         "encoder-only and decoder-only models over texts; capture its modules with "
                         "spectra_cli.capture, running the model yourself.")
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int) and vocab > 0 and len(tokenizer) < vocab // 2:
        raise InputError(f"{path}: its tokenizer has {len(tokenizer):,} tokens for a model of {vocab:,} (are the "
                         "tokenizer's files missing?); every word would be an unknown token.")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise InputError(f"{path}: its tokenizer has neither a padding nor an end-of-sequence token to pad a "
                             "batch with; use --batch-size 1.")
        tokenizer.pad_token = tokenizer.eos_token  # (the mask leaves the padding out whatever token it is)
    positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    if isinstance(positions, int) and positions > 0:
        max_length = min(max_length, positions)
    if str(device).strip().lower().startswith("meta"):
        raise OptionError(f"{param('device', device)}: the meta device holds no values to capture.")
    try:
        net = net.to(torch.device(device)).eval()
    except Exception as exc:  # noqa: BLE001 - torch says AssertionError, RuntimeError or ValueError for a device
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OptionError(f"{param('device', device)} is not a device this torch can use ({first[:200]}).") from None
    return net, tokenizer, max_length


def _texts(path: str, column: str) -> Iterator[str]:
    """The texts of a ``.txt`` (one a line, empty lines left out), ``.jsonl`` (field ``column``) or Parquet file
    (column ``column``), one at a time."""
    if not os.path.isfile(path):
        raise InputError(f"{param('texts', path)} is not a file.")
    fmt = formats.by_path(path, (formats.PARQUET, formats.JSONL))
    if fmt is formats.PARQUET:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except Exception as exc:  # noqa: BLE001 - pyarrow's errors are many
            raise InputError(f"{path} is not a readable Parquet file ({exc}).") from None
        if column not in pf.schema_arrow.names:
            raise InputError(f"{path} has no column {column!r} (columns: {', '.join(pf.schema_arrow.names[:10])}); "
                             f"name the text column with {param('column')}.")
        for batch in pf.iter_batches(columns=[column], batch_size=1024):
            for v in batch.column(0).to_pylist():
                if isinstance(v, str) and v.strip():
                    yield v[:MAX_TEXT_CHARS]
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        for i, line in enumerate(fh, 1):
            if fmt is formats.JSONL:
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    raise InputError(f"{path} line {i} is not JSON (a .jsonl holds one object a line).") from None
                v = doc.get(column) if isinstance(doc, dict) else None
                if not isinstance(v, str):
                    raise InputError(f"{path} line {i} has no text field {column!r}; name it with "
                                     f"{param('column')}.")
            else:
                v = line.rstrip("\n")
            if v.strip():
                yield v[:MAX_TEXT_CHARS]


def _count(path: str) -> int:
    """About how many texts a file holds (its lines, or a Parquet file's rows), for the progress bar."""
    if formats.PARQUET.matches(path):
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # noqa: BLE001 - the read itself says what is wrong
            return 0
    lines = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            lines += chunk.count(b"\n")
    return lines


def _run(cap: Capture, net: Any, tokenizer: Any, texts: Iterator[str], *, batch_size: int, max_length: int,
         max_tokens: int | None, total: int) -> None:
    import torch

    tick = stage("capture: texts through the model", total)
    done = tokens = 0
    batch: list[str] = []

    def flush() -> int:
        enc = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        enc = {k: v.to(net.device) for k, v in enc.items()}
        try:
            with torch.no_grad():
                net(**enc)
        except SpectraError:
            raise
        except Exception as exc:  # noqa: BLE001 - the model's own failure on these inputs, said in one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise InputError(f"the model failed on a batch of texts ({type(exc).__name__}: {first[:300]}).") from None
        m = enc.get("attention_mask")
        return int(m.sum()) if m is not None else int(enc["input_ids"].numel())

    for text in texts:
        batch.append(text)
        if len(batch) == batch_size:
            tokens += flush()
            done += len(batch)
            batch = []
            tick(done)
            if max_tokens is not None and tokens >= max_tokens:
                break
    if batch and (max_tokens is None or tokens < max_tokens):
        tokens += flush()
        done += len(batch)
        tick(done)
    if done == 0:
        raise InputError("the texts file holds no text (empty lines are left out).")
    cap.texts_read, cap.tokens_read = done, tokens
