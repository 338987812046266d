"""``spectra capture``: the activations of a model's modules, streamed into moment files as the model runs.

:func:`capture` installs the hooks (:class:`spectra_cli.capturing.hooks.Capture`) on a ``torch.nn.Module``;
with ``texts=`` it also loads a local Hugging Face model folder (transformers; no network) and feeds it the
texts of a file itself, in batches, and with ``out=`` saves one moment file per module.

A model folder is an input written by someone else, so loading it runs none of its code and unpickles nothing:
every option is checked first (before torch is imported); then the folder (its config.json parsed here, its
weights ``*.safetensors`` only, no FIFO among its files); the outputs (never the texts file, never inside the
model folder); the memory the model and the moments need; and only then the model is loaded, with
``trust_remote_code=False`` (a folder that needs its own code is refused, and nothing asks on stdin), a built-in
attention implementation (``sdpa`` unless ``attention`` names ``eager``: a config's hub kernel is not fetched) and
``use_safetensors=True``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from typing import Any

from spectra_cli.capturing.hooks import Capture, check_keywords, snapshot_folder
from spectra_cli.errors import InputError, OptionError, OutputError, SpectraError, param
from spectra_cli.options import gib, refuse_over_budget
from spectra_cli.sinks import check_not_input
from spectra_cli.sources import formats
from spectra_cli.stages import reports_progress, stage
from spectra_cli.validate import MAX_STEP, check_choice, check_int, check_path

#: A text longer than this many characters is cut to it before tokenising (the tokenizer keeps max_length tokens).
MAX_TEXT_CHARS = 100_000
#: The longest line of a ``.jsonl`` texts file (its text field is then cut to :data:`MAX_TEXT_CHARS`).
MAX_JSON_LINE = 4 << 20
#: The most text a row group of a Parquet texts file may hold uncompressed (it is read a row group at a time).
MAX_PARQUET_PIECE = 256 << 20
#: The most texts a forward pass takes, and the most tokens a text may keep.
MAX_BATCH = 65_536
MAX_LENGTH = 1 << 20
#: The attention implementations a capture loads a model with (built into transformers and torch).
ATTENTIONS = ("sdpa", "eager")
#: The largest config.json read, and the most entries a model folder may list.
MAX_CONFIG_BYTES = 16 << 20
MAX_FOLDER_ENTRIES = 100_000
#: Weights a capture does not read: pickles (torch's .bin/.pt/.pth/.ckpt) and other frameworks' formats.
OTHER_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack")
_DEVICE = re.compile(r"(cpu|cuda|mps|xpu|hpu|npu|mtia|meta)(?::(\d{1,4}))?")


@reports_progress
def capture(model: Any, *, modules: str, groups: int = 0, precision: str = "float32",
            mask: str | Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = "auto",
            output: str | int | None = None, positions: str | None = None, drop_nonfinite: bool = False,
            weights: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None,
            texts: str | os.PathLike[str] | None = None, out: str | os.PathLike[str] | None = None,
            step: int | None = None, batch_size: int = 32, max_length: int = 512, max_tokens: int | None = None,
            column: str = "text", device: str = "cpu", attention: str = "sdpa",
            max_memory: int | str | None = None,
            progress: Callable[[int, int], None] | None = None) -> Capture:
    """Stream the outputs of a model's modules into mergeable moments, one set per module.

    Parameters
    ----------
    model : torch.nn.Module or path
        The model whose modules are hooked; with ``texts``, a local Hugging Face model folder may be given
        instead (loaded with transformers, ``local_files_only``, its weights from ``*.safetensors`` only, none of
        its own code run: see the module's docstring).
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
    attention : str
        With ``texts``: the attention implementation the model is loaded with, ``sdpa`` (torch's; ``eager`` where
        the model has none) or ``eager``; whatever the folder's config names (a hub kernel, say) is not used.
    max_memory : int or str, optional
        Bytes (or ``"8GB"``) the moments (each module's ``d x d`` matrices, one per row group) and, with ``texts``,
        the model's weights may take, checked before they are allocated (default: half the physical memory).
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
                               "weights": weights, "max_memory": max_memory}
    if texts is None:
        for name, value in (("out", out), ("step", step), ("max_tokens", max_tokens)):
            if value is not None:
                raise OptionError(f"{param(name)} is for a capture that runs the model over {param('texts')}.")
        return Capture(model, **options)
    # every option first: a refusal takes no model load (seconds to minutes) and no torch import
    budget = check_keywords(**options)["budget"]
    batch_size = check_int("batch_size", batch_size, minimum=1, maximum=MAX_BATCH)
    max_length = check_int("max_length", max_length, minimum=2, maximum=MAX_LENGTH)
    if max_tokens is not None:
        max_tokens = check_int("max_tokens", max_tokens, minimum=1, maximum=MAX_STEP)
    if step is not None:
        step = check_int("step", step, minimum=0, maximum=MAX_STEP)
    if not isinstance(column, str) or not column:
        raise OptionError(f"{param('column', column, show=True)} must be the name of the text field or column.")
    device = _device_name(device)
    attention = check_choice("attention", attention, ATTENTIONS)
    texts = check_path("texts", texts)
    if not os.path.isfile(texts):  # (a FIFO or a device is no file: nothing blocks on it)
        raise InputError(f"{param('texts', texts)} is not a file.")
    path, config, weight_bytes = _model_folder(model)
    if out is not None:
        out = _check_out(out, step, path, texts)
    refuse_over_budget("capture", f"the model {path} ({weight_bytes:,} bytes of weights)", weight_bytes,
                       "its weights, loaded whole", budget, fewer="capture a smaller model")
    net, tokenizer, max_length = _load(path, config, device, attention, max_length, budget=budget)
    options["max_memory"] = max(budget - _held(net), 1)  # (the moments: what the model leaves of the budget)
    cap = Capture(net, **options)
    if out is not None:  # (the modules' files are known now, before any text runs)
        _, files = cap.plan(out, step=step, flag="out")
        for f in files.values():
            check_not_input(f, [texts, path], "out")
    try:
        _run(cap, net, tokenizer, _texts(texts, column), batch_size=batch_size, max_length=max_length,
             max_tokens=max_tokens, total=_count(texts))
    except MemoryError:
        raise InputError(f"capture ran out of memory running the model over the texts; lower {param('batch_size')} "
                         f"or {param('max_length')}, or capture fewer modules or fewer {param('groups')}.") from None
    finally:
        cap.close()
    if out is not None:
        cap.save(out, step=step)
    return cap


def _device_name(device: Any) -> str:
    """``device`` if it names a torch device (``cpu``, ``cuda``, ``cuda:1``, ``mps``, ...), checked without torch."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device.strip().lower()):
        raise OptionError(f"{param('device', device, show=True)} is not a torch device (cpu, cuda, cuda:1, mps, "
                          "xpu, ...).")
    if device.strip().lower().startswith("meta"):
        raise OptionError(f"{param('device', device)}: the meta device holds no values to capture.")
    return device.strip().lower()


def _model_folder(model: Any) -> tuple[str, dict[str, Any], int]:
    """A local Hugging Face model folder checked before transformers sees it: its path, its config (parsed here,
    bounded) and the bytes of its weights; refused when it is not a folder, lists a FIFO or another file that is
    not a regular file, has no config.json, or keeps its weights anywhere but ``*.safetensors``."""
    if not isinstance(model, str | os.PathLike):
        raise OptionError(f"{param('texts')} runs a model loaded from a local Hugging Face folder: give its path as "
                          f"{param('model')} (with a module, run it yourself inside the capture).")
    path = check_path("model", model)
    if not os.path.isdir(path):
        raise InputError(f"{path} is not a folder; a local Hugging Face model folder (config.json, the weights and "
                         "the tokenizer's files) is required.")
    files: dict[str, int] = {}  # every regular file of the folder and its sub-folders, by its path inside it
    seen = 0
    for root, dirs, names in os.walk(path, onerror=None):  # (links to folders are not followed)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            seen += 1
            if seen > MAX_FOLDER_ENTRIES:
                raise InputError(f"{path} holds more than {MAX_FOLDER_ENTRIES:,} files; a model folder holds a "
                                 "config, weights and a tokenizer.")
            full = os.path.join(root, name)
            try:
                st = os.stat(full)
            except OSError:
                continue  # (a dangling link: nothing reads it)
            if stat.S_ISREG(st.st_mode):
                files[os.path.relpath(full, path)] = st.st_size
            elif not stat.S_ISDIR(st.st_mode):
                kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "not a regular file"
                raise InputError(f"{full} is {kind}; a model folder holds regular files (a read of it would block "
                                 "or never end).")
    if "config.json" not in files:
        raise InputError(f"{path} has no config.json; a local Hugging Face model folder (config.json, the weights "
                         "and the tokenizer's files) is required.")
    if files["config.json"] > MAX_CONFIG_BYTES:
        raise InputError(f"{path}/config.json is {files['config.json']:,} bytes; a model's config is a few KB "
                         f"(at most {MAX_CONFIG_BYTES:,} are read).")
    try:
        with open(os.path.join(path, "config.json"), "rb") as fh:
            config = json.loads(fh.read(MAX_CONFIG_BYTES + 1))
    except (OSError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "nested too deep" if isinstance(exc, RecursionError) \
            else "not JSON"
        raise InputError(f"{path}/config.json cannot be read ({why}).") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}/config.json holds {type(config).__name__}, not a model's config (an object).")
    _check_indexes(path, files)
    weights = {n: size for n, size in files.items() if n.endswith(".safetensors") and os.sep not in n}
    if not weights:
        other = sorted(n for n in files if n.lower().endswith(OTHER_WEIGHTS))
        if other:
            raise InputError(f"{path} keeps its weights as {other[0]}, a pickle or another framework's file; "
                             "spectra never unpickles a file, so capture reads *.safetensors only: convert them once, "
                             "where you trust the file (transformers: AutoModel.from_pretrained(DIR, "
                             "use_safetensors=False).save_pretrained(NEW_DIR) writes model.safetensors), and capture "
                             "NEW_DIR.")
        raise InputError(f"{path} holds no weights (*.safetensors); a local Hugging Face model folder (config.json, "
                         "the weights and the tokenizer's files) is required.")
    return path, config, sum(weights.values())


def _check_indexes(path: str, files: dict[str, int]) -> None:
    """Every safetensors weights index of the folder (``*.safetensors.index.json``, the one transformers reads with
    ``use_safetensors=True``) maps its tensors to ``.safetensors`` files of the folder
    itself (a plain name, no sub-folder, no ``..``) that exist as regular files: an index that points at a pickle
    (``.bin``) would have transformers unpickle it, one that points at a FIFO would block the load."""
    for name, size in files.items():
        if not name.endswith(".safetensors.index.json") or os.sep in name:
            continue  # (a pytorch_model.bin.index.json beside it is never read: the load takes safetensors only)
        where = os.path.join(path, name)
        if size > MAX_CONFIG_BYTES:
            raise InputError(f"{where} is {size:,} bytes; a weights index is at most {MAX_CONFIG_BYTES:,}.")
        try:
            with open(where, "rb") as fh:
                doc = json.loads(fh.read(MAX_CONFIG_BYTES + 1))
        except (OSError, ValueError, RecursionError):
            raise InputError(f"{where} is not a readable JSON weights index.") from None
        shards = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(shards, dict):
            raise InputError(f"{where} has no weight_map (tensor -> shard file).")
        for shard in {str(v) for v in shards.values()}:
            plain = shard == os.path.basename(shard) and shard not in (".", "..") and "\\" not in shard
            if not (plain and shard.endswith(".safetensors")):
                raise InputError(f"{where} maps tensors to {shard[:200]!r}; capture reads weights only from "
                                 ".safetensors files beside the index (never a pickle such as a .bin, never a file "
                                 "elsewhere).")
            if shard not in files:
                raise InputError(f"{where} maps tensors to {shard[:200]!r}, which is not a regular file of the "
                                 "folder.")


def _check_out(out: Any, step: int | None, model: str, texts: str) -> str:
    """``out`` checked before the model loads: a folder (or none yet), its snapshot folder ``step_N`` too, not
    inside the model folder, and not the folder of a texts file named as a moment file."""
    out, target = snapshot_folder(out, step, "out")
    up = os.path.abspath(target)
    while not os.path.lexists(up):
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        raise OutputError(f"{param('out', out)}: {up} is a file, so no folder can be made below it; name a folder.")
    real, home = os.path.realpath(target), os.path.realpath(model)
    if real == home or real.startswith(home.rstrip(os.sep) + os.sep):
        raise OutputError(f"{param('out', out)} is inside the model folder {model}; write the moment files "
                          "elsewhere (a model folder is an input).")
    if os.path.dirname(os.path.realpath(texts)) == real and texts.lower().endswith(".npz"):
        raise OutputError(f"{param('out', out)} holds the texts file {texts}, named as a moment file this capture "
                          "may write; write the moment files elsewhere.")
    return out


def _held(net: Any) -> int:
    """Bytes of a model's parameters and buffers."""
    return int(sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers())))


def _load(path: str, config: dict[str, Any], device: str, attention: str, max_length: int, *,
          budget: int) -> tuple[Any, Any, int]:
    """The model (eval mode, on ``device``), its tokenizer (padding with its end-of-sequence token where it has
    no padding token) and the tokens a text may keep (``max_length``, at most the model's positions), from a
    checked local folder (:func:`_model_folder`), running none of its code (see the module's docstring)."""
    try:
        import torch
    except ImportError:
        raise InputError("spectra capture MODEL_DIR needs PyTorch and transformers: pip install "
                         "'spectra-geometry[capture]'.") from None
    try:
        dev = torch.device(device)
        if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
            raise RuntimeError("no such CUDA device" if torch.cuda.is_available() else "CUDA is not available")
    except Exception as exc:  # noqa: BLE001 - torch says AssertionError, RuntimeError or ValueError for a device
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OptionError(f"{param('device', device)} is not a device this torch can use ({first[:200]}).") from None
    try:
        import transformers
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        raise InputError("spectra capture MODEL_DIR needs PyTorch and transformers: pip install "
                         "'spectra-geometry[capture]'.") from None
    from transformers.utils import logging as hf_logging

    model_type = config.get("model_type")
    if config.get("auto_map") is not None and not (isinstance(model_type, str)
                                                   and model_type in transformers.CONFIG_MAPPING):
        shown = model_type if isinstance(model_type, str) else None
        raise InputError(f"{path} needs its own code: its config.json maps the model to modules of the folder "
                         f"(auto_map), for model_type {str(shown)[:80]!r}, which transformers does not know. spectra "
                         "capture never runs code from a model folder; if you trust it, load the model yourself "
                         "(trust_remote_code=True) and capture it with spectra_cli.capture(model, modules=...).")
    hf_logging.set_verbosity_error()  # (its advice and its loading bar would go to stderr)
    hf_logging.disable_progress_bar()
    no_code = {"local_files_only": True, "trust_remote_code": False}
    try:
        # nothing is read from stdin (a prompt gets an empty answer: no), nothing is printed on stdout
        with _no_stdin(), contextlib.redirect_stdout(sys.stderr):
            # the model as its config declares it, on the meta device (no memory): what loading it will allocate,
            # whatever the weights files hold (missing weights are made at random, at full size)
            cfg = transformers.AutoConfig.from_pretrained(path, **no_code)
            with torch.device("meta"):
                shape = AutoModel.from_config(cfg, attn_implementation=attention, trust_remote_code=False)
            refuse_over_budget("capture", f"the model {path} (as its config.json declares it)", _held(shape),
                               "its parameters and buffers", budget, fewer="capture a smaller model")
            del shape
            tokenizer = AutoTokenizer.from_pretrained(path, **no_code)
            net = AutoModel.from_pretrained(path, use_safetensors=True, attn_implementation=attention, **no_code)
    except SpectraError:
        raise
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
    try:
        net = net.to(dev).eval()
    except Exception as exc:  # noqa: BLE001 - torch says AssertionError, RuntimeError or ValueError for a device
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise OptionError(f"{param('device', device)} is not a device this torch can use ({first[:200]}).") from None
    return net, tokenizer, max_length


@contextlib.contextmanager
def _no_stdin() -> Iterator[None]:
    """Standard input replaced by an empty stream: whatever asks a question gets end-of-file, never the user's
    pipe or terminal."""
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved


def _lines(fh: Any, limit: int) -> Iterator[tuple[int, str, bool]]:
    """The lines of a text file, each read to at most ``limit`` characters (the rest of a longer line is skipped
    in pieces, never held whole): ``(line number, text without its newline, whether it was cut)``."""
    i = 0
    while line := fh.readline(limit + 1):
        i += 1
        if len(line) > limit and not line.endswith("\n"):
            while (rest := fh.readline(1 << 20)) and not rest.endswith("\n"):
                pass
            yield i, line[:limit], True
        else:
            yield i, line.rstrip("\n"), False


def _texts(path: str, column: str) -> Iterator[str]:
    """The texts of a ``.txt`` (one a line, empty lines left out), ``.jsonl`` (field ``column``) or Parquet file
    (column ``column``), one at a time, each cut to :data:`MAX_TEXT_CHARS`; nothing larger than a line (or a
    row group's text) is read at once."""
    if not os.path.isfile(path):
        raise InputError(f"{param('texts', path)} is not a file.")
    fmt = formats.by_path(path, (formats.PARQUET, formats.JSONL))
    if fmt is formats.PARQUET:
        yield from _parquet_texts(path, column)
        return
    with open(path, encoding="utf-8", errors="replace") as fh:
        if fmt is not formats.JSONL:
            for _, v, _ in _lines(fh, MAX_TEXT_CHARS):
                if v.strip():
                    yield v
            return
        for i, line, cut in _lines(fh, MAX_JSON_LINE):
            if cut:
                raise InputError(f"{path} line {i} is longer than {MAX_JSON_LINE:,} characters; a .jsonl of texts "
                                 f"holds one object a line (each text is cut to {MAX_TEXT_CHARS:,}).")
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except (ValueError, RecursionError):
                raise InputError(f"{path} line {i} is not JSON (a .jsonl holds one object a line).") from None
            field = doc.get(column) if isinstance(doc, dict) else None
            if not isinstance(field, str):
                raise InputError(f"{path} line {i} has no text field {column!r}; name it with {param('column')}.")
            if field.strip():  # (a lone surrogate escape, "\\ud800", is no text: replaced, as a .txt's bad bytes are)
                yield field[:MAX_TEXT_CHARS].encode("utf-8", "replace").decode("utf-8")


def _parquet_texts(path: str, column: str) -> Iterator[str]:
    """A Parquet file's texts, a row group at a time (each at most :data:`MAX_PARQUET_PIECE` of text
    uncompressed), in batches of 64 rows; a dictionary-encoded column stays encoded, each distinct text cut
    once (a small file whose one long text repeats on every row never becomes gigabytes of strings)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(path).schema_arrow.names
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors are many
        raise InputError(f"{path} is not a readable Parquet file ({str(exc)[:200]}).") from None
    if column not in names:
        raise InputError(f"{path} has no column {column!r} (columns: {', '.join(names[:10])}); name the text column "
                         f"with {param('column')}.")
    try:
        pf = pq.ParquetFile(path, read_dictionary=[column])
        kind = pf.schema_arrow.field(column).type
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors are many
        raise InputError(f"{path}: column {column!r} cannot be read as text ({str(exc)[:200]}).") from None
    value_type = kind.value_type if pa.types.is_dictionary(kind) else kind
    if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        raise InputError(f"{path}: column {column!r} holds {value_type}, not text; name the text column with "
                         f"{param('column')}.")
    j = names.index(column)
    for g in range(pf.metadata.num_row_groups):
        size = pf.metadata.row_group(g).column(j).total_uncompressed_size
        if size > MAX_PARQUET_PIECE:
            raise InputError(f"{path}: row group {g} holds {gib(size)} of column {column!r} uncompressed; capture "
                             f"reads texts a row group of at most {gib(MAX_PARQUET_PIECE)} at a time (write the file "
                             "with smaller row groups).")
    try:
        for batch in pf.iter_batches(columns=[column], batch_size=64):
            col = batch.column(0)
            if pa.types.is_dictionary(col.type):
                used = pc.unique(col.indices.drop_null())
                cut = pc.utf8_slice_codeunits(col.dictionary.take(used), 0, MAX_TEXT_CHARS).to_pylist()
                text = dict(zip(used.to_pylist(), cut, strict=True))
                values = [text[k] if k is not None else None for k in col.indices.to_pylist()]
            else:
                values = pc.utf8_slice_codeunits(col, 0, MAX_TEXT_CHARS).to_pylist()
            for v in values:
                if isinstance(v, str) and v.strip():
                    yield v
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(f"{path} cannot be read ({str(exc).strip()[:200]}).") from None


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
        try:
            enc = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own failure on these texts, said in one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise InputError(f"the tokenizer failed on a batch of texts ({type(exc).__name__}: {first[:300]}).") \
                from None
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
