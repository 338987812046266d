"""PEFT LoRA adapter folders (``adapter_config.json`` and ``adapter_model.safetensors``), read without peft or torch.

Each adapted module ``M`` has ``lora_A`` (``r x in``) and ``lora_B`` (``out x r``); its change of weights is
``Delta W = s B A`` with ``s = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with ``use_rslora``; ``r`` and
``lora_alpha`` per module from ``rank_pattern`` / ``alpha_pattern``, matched as peft matches them: the first key
``K`` with ``(.*\\.)?(K)$`` matching the module's name, here on RE2), stored as the base layer stores it: ``out x in``
for a linear layer, transposed with ``fan_in_fan_out`` (GPT-2's Conv1D), ``num_embeddings x dim`` for an
embedding (``lora_embedding_A`` is ``r x num_embeddings``, ``lora_embedding_B`` ``dim x r``: ``Delta W = s (B A)^T``).

Its spectrum comes from the small problem: with ``B = Q_B R_B`` and ``A^T = Q_A R_A`` (thin QR), ``Delta W = s Q_B
(R_B R_A^T) Q_A^T``, so its nonzero singular values are those of the ``r x r`` matrix ``s R_B R_A^T``; no ``out x in``
matrix is formed. DoRA (``use_dora``) rescales each output row of ``W + s B A`` to the learned magnitude ``m``: ``W' =
diag(m / ||(W + s B A)_i||) (W + s B A)``, so its change ``W' - W`` depends on the base weights and is read as rows
(``--base`` is then needed). Anything else that changes the weights another way (another ``peft_type``, QALoRA,
LoRA on parameters, layer replication, convolution LoRA) is refused in one line; the config's other fields do not
change the weights. ``adapter_model.bin`` is a pickle: never read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spectra_cli.errors import InputError
from spectra_cli.sources.base import Source, SourceInfo
from spectra_cli.sources.change import ChangeSizes
from spectra_cli.sources.safetensors import read_tensor

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PICKLED = "adapter_model.bin"
#: The config of an adapter is a few kilobytes; a larger one is no adapter config.
MAX_CONFIG_BYTES = 1 << 20
#: The prefix PEFT's save gives every key (the PeftModel's ``base_model.model``).
PREFIX = "base_model.model."
#: Config fields that, set, change the weights in a way this reader does not compute (each refused by name).
NOT_READ = {
    "use_qalora": "QALoRA (its A acts on pooled input groups)",
    "target_parameters": "LoRA on parameters rather than modules",
    "layer_replication": "layer replication (the adapted model has layers the base lacks)",
    "use_bdlora": "block-diagonal LoRA",
    "arrow_config": "Arrow routing over several LoRA experts",
    "monteclora_config": "MonteCLoRA (sampled adapters)",
    "kasa_config": "KaSA (a singular-value adapter)",
    "velora_config": "VeLoRA",
}
DEFINITION = ("Delta W = s B A, s = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), as the base stores the "
              "layer; singular values from the r x r matrix s R_B R_A^T (B = Q_B R_B, A^T = Q_A R_A)")
DORA_DEFINITION = ("Delta W = diag(m / ||(W + s B A)_i||) (W + s B A) - W (DoRA: each output row of W + s B A "
                   "rescaled to its learned magnitude m), read as rows from the base")


@dataclass(frozen=True, slots=True)
class AdapterLayer:
    """One adapted module of an adapter folder: its factors' tensor names, its scale and the shape of the change (as
    the base stores the layer: rows first)."""

    folder: str
    module: str
    a_key: str
    b_key: str
    rank: int
    alpha: float
    scale: float
    shape: tuple[int, int]
    kind: str  # "linear", "linear (fan_in_fan_out)", "embedding"
    magnitude_key: str | None = None  # DoRA's learned row norms
    base: str | None = None  # the base checkpoint's tensor, "file::name", when one is given

    @property
    def name(self) -> str:
        return f"{self.folder}::{self.module}"

    @property
    def weights(self) -> str:
        return os.path.join(self.folder, WEIGHTS)

    @property
    def dora(self) -> bool:
        return self.magnitude_key is not None

    def fingerprint(self) -> str:
        import hashlib

        from spectra_cli.sources.base import fingerprint

        h = hashlib.sha256(f"adapter;{fingerprint(self.weights)};{fingerprint(os.path.join(self.folder, CONFIG))};"
                           f"{self.module};{fingerprint(self.base) if self.base else ''}".encode())
        return h.hexdigest()[:16]

    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """``(L, R)`` in float64 with the change ``Delta W = L @ R`` as stored (rows first), the scale in ``L``."""
        a = read_tensor(self.weights, self.a_key)
        b = read_tensor(self.weights, self.b_key)
        for key, t in ((self.a_key, a), (self.b_key, b)):
            if not np.all(np.isfinite(t)):
                raise InputError(f"{self.weights}: tensor {key!r} has NaN or inf entries; no change can be measured "
                                 "from it.")
        if self.kind == "embedding":  # A: r x num_embeddings, B: dim x r; Delta W = s (B A)^T = (s A^T) B^T
            return self.scale * a.T, b.T
        if self.kind.endswith("(fan_in_fan_out)"):  # stored in x out: Delta W^T = (s A^T) B^T
            return self.scale * a.T, b.T
        return self.scale * b, a

    def singular_values(self, *, centered: bool = False) -> np.ndarray:
        """The change's nonzero singular values (at most r), from the r x r problem; ``centered``: of the change less
        its mean row (the mean row of ``L R`` is ``mean(L) R``: still rank r)."""
        left, right = self.factors()
        if centered:
            left = left - left.mean(axis=0)
        _, rl = np.linalg.qr(left)
        _, rr = np.linalg.qr(right.T)
        with np.errstate(over="ignore", invalid="ignore"):
            core = rl @ rr.T
        if not np.all(np.isfinite(core)):
            raise InputError(f"{self.name}: the change s B A overflows float64 (s = {self.scale:g}); check lora_alpha "
                             "and the factors.")
        return np.linalg.svd(core, compute_uv=False)

    def to_dict(self) -> dict[str, Any]:
        return {"definition": DORA_DEFINITION if self.dora else DEFINITION, "adapter": self.folder,
                "module": self.module, "kind": self.kind, "r": self.rank, "lora_alpha": self.alpha,
                "scale": self.scale, "dora": self.dora, "base": self.base}


@dataclass
class Adapter:
    """What an adapter folder holds: its layers, and what was noted or skipped reading it."""

    folder: str
    config: dict[str, Any]
    layers: list[AdapterLayer]
    notes: list[str] = field(default_factory=list)
    #: (module, kind, reason): modules with LoRA tensors that are not analysed
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    notes_dora_ignored: bool = False


def is_adapter(path: str) -> bool:
    """Whether ``path`` is a PEFT adapter folder (an ``adapter_config.json`` in it)."""
    return os.path.isdir(path) and os.path.lexists(os.path.join(path, CONFIG))


def _config(folder: str) -> dict[str, Any]:
    from spectra_cli.sources.base import check_regular, read_json

    path = os.path.join(folder, CONFIG)
    check_regular(path)
    if not os.path.isfile(path):
        raise InputError(f"{path} is not a regular file.")
    if os.path.getsize(path) > MAX_CONFIG_BYTES:
        raise InputError(f"{path} is {os.path.getsize(path):,} bytes; an adapter config is a few kilobytes.")
    doc = read_json(path, "adapter config")
    if not isinstance(doc, dict):
        raise InputError(f"{path} is not an adapter config: not a JSON object.")
    return doc


def _number(path: str, key: str, v: Any, *, integer: bool = False) -> float:
    ok = isinstance(v, int) and not isinstance(v, bool) if integer else \
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v <= 0:
        raise InputError(f"{path}: {key} is {v!r}; a positive {'integer' if integer else 'number'} is needed.")
    return float(v)


def _patterns(path: str, key: str, value: Any, *, integer: bool) -> list[tuple[Any, float]]:
    """``rank_pattern`` / ``alpha_pattern``: ``{pattern: value}``, each pattern compiled (RE2) as peft matches it."""
    from spectra_cli.errors import OptionError
    from spectra_cli.validate import check_regex

    if value is None:
        return []
    if not isinstance(value, dict):
        raise InputError(f"{path}: {key} must be an object of pattern: value.")
    out = []
    for pattern, v in value.items():
        try:
            compiled = check_regex(key, rf"^(.*\.)?({pattern})$")
        except OptionError as exc:
            raise InputError(f"{path}: {key} key {pattern[:80]!r} is not a pattern spectra can read ({exc}).") from None
        out.append((compiled, _number(path, f"{key}[{pattern[:80]!r}]", v, integer=integer)))
    return out


def _pick(patterns: list[tuple[Any, float]], module: str, default: float) -> float:
    for compiled, v in patterns:
        if compiled.search(module):
            return v
    return default


def read_adapter(folder: str) -> Adapter:
    """The adapted layers of a PEFT LoRA folder, each checked against the config (ranks, shapes), or one line saying
    why it cannot be read."""
    from spectra_cli.sources.safetensors import read_header

    path = os.path.join(folder, CONFIG)
    config = _config(folder)
    weights = os.path.join(folder, WEIGHTS)
    if not os.path.lexists(weights):
        if os.path.lexists(os.path.join(folder, PICKLED)):
            raise InputError(f"{folder} holds {PICKLED}, a PyTorch pickle; spectra never unpickles (loading it could "
                             "run code). Save the adapter with safe_serialization=True (adapter_model.safetensors).")
        raise InputError(f"{folder} has {CONFIG} but no {WEIGHTS}.")
    kind = config.get("peft_type")
    if kind != "LORA":
        raise InputError(f"{path}: peft_type {kind!r}; spectra reads LoRA adapters (peft_type 'LORA') only.")
    for key, what in NOT_READ.items():
        v = config.get(key)
        if v not in (None, False, {}, []):
            raise InputError(f"{path}: {key} is set ({what}); spectra does not compute that change of weights.")
    r = _number(path, "r", config.get("r"), integer=True)
    alpha = _number(path, "lora_alpha", config.get("lora_alpha", 8))
    flags = {}
    for key in ("use_rslora", "use_dora", "fan_in_fan_out"):
        v = config.get(key, False)
        v = False if v is None else v
        if not isinstance(v, bool):
            raise InputError(f"{path}: {key} is {v!r}; true or false is needed.")
        flags[key] = v
    ranks = _patterns(path, "rank_pattern", config.get("rank_pattern"), integer=True)
    alphas = _patterns(path, "alpha_pattern", config.get("alpha_pattern"), integer=False)
    header, _ = read_header(weights)
    modules, others = _modules(header)
    adapter = Adapter(folder, config, [])
    for module, parts in modules.items():
        layer = _layer(adapter, path, weights, header, module, parts, rank=int(_pick(ranks, module, r)),
                       alpha=_pick(alphas, module, alpha), flags=flags)
        if layer is not None:
            adapter.layers.append(layer)
    init = config.get("init_lora_weights")
    if isinstance(init, str) and init.lower().startswith(("pissa", "olora", "corda", "loftq", "lora_ga")):
        adapter.notes.append(f"init_lora_weights is {init!r}: that initialisation also changes the base weights, so "
                             "the change s B A is relative to the modified base (unless the adapter was saved "
                             "converted, with r and lora_alpha doubled)")
    if others:
        adapter.notes.append(f"{len(others)} tensor(s) of {WEIGHTS} are not LoRA factors (e.g. {others[0]}: "
                             "modules_to_save, biases); not analysed")
    if not adapter.layers:
        why = adapter.skipped[0][2] if adapter.skipped else "no lora_A / lora_B tensors"
        raise InputError(f"{folder}: no adapted layer to analyse ({why}).")
    return adapter


def _modules(header: dict[str, Any]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """The adapted modules' tensors by part (``A``, ``B``, ``eA``, ``eB``, ``m``), and the other tensors' names."""
    modules: dict[str, dict[str, str]] = {}
    others: list[str] = []
    for name in sorted(header):
        short = name.removeprefix(PREFIX)
        part = None
        for suffix, p in ((".lora_A.weight", "A"), (".lora_B.weight", "B"), (".lora_embedding_A", "eA"),
                          (".lora_embedding_B", "eB"), (".lora_magnitude_vector.weight", "m"),
                          (".lora_magnitude_vector", "m")):
            if short.endswith(suffix):
                part, short = p, short[: -len(suffix)]
                break
        if part is None:
            others.append(name)
            continue
        modules.setdefault(short, {})[part] = name
    return modules, others


def _layer(adapter: Adapter, path: str, weights: str, header: dict[str, Any], module: str, parts: dict[str, str], *,
           rank: int, alpha: float, flags: dict[str, bool]) -> AdapterLayer | None:
    """One adapted module checked against its config (its rank, DoRA's magnitude), or None (skipped, said)."""
    embedding = "eA" in parts or "eB" in parts
    a_key, b_key = (parts.get("eA"), parts.get("eB")) if embedding else (parts.get("A"), parts.get("B"))
    if a_key is None or b_key is None:
        adapter.skipped.append((module, "incomplete adapter", "it has one of lora_A and lora_B, not both"))
        return None
    a_shape, b_shape = header[a_key]["shape"], header[b_key]["shape"]
    if len(a_shape) == 4 and len(b_shape) == 4:
        adapter.skipped.append((module, "convolution LoRA", f"lora_A of shape {a_shape}: a convolution's LoRA "
                                "(its change is a kernel, not a matrix) is not read"))
        return None
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise InputError(f"{weights}: {module} has lora_A of shape {a_shape} and lora_B of shape {b_shape}; a LoRA "
                         "layer's factors are matrices.")
    if min(a_shape[1], b_shape[0]) < 2:
        adapter.skipped.append((module, "change with a side < 2", f"lora_A {a_shape}, lora_B {b_shape}: a change of "
                                f"{b_shape[0]} x {a_shape[1]} has no spectrum to analyse"))
        return None
    if a_shape[0] != rank or b_shape[1] != rank:
        raise InputError(f"{weights}: {module} has lora_A {a_shape} and lora_B {b_shape}, but the config gives it "
                         f"rank {rank}; the adapter and its config disagree.")
    scale = alpha / math.sqrt(rank) if flags["use_rslora"] else alpha / rank
    if embedding:
        shape, how = (int(a_shape[1]), int(b_shape[0])), "embedding"
    elif flags["fan_in_fan_out"]:
        shape, how = (int(a_shape[1]), int(b_shape[0])), "linear (fan_in_fan_out)"
    else:
        shape, how = (int(b_shape[0]), int(a_shape[1])), "linear"
    magnitude = parts.get("m")
    if flags["use_dora"]:
        if magnitude is None:
            raise InputError(f"{path}: use_dora is set, but {module} has no lora_magnitude_vector.")
        if how != "linear":
            raise InputError(f"{path}: DoRA on {how} layers ({module}) is not read; spectra reads DoRA on linear "
                             "layers stored out x in.")
        if header[magnitude]["shape"] != [shape[0]]:
            raise InputError(f"{weights}: {module}'s lora_magnitude_vector has shape {header[magnitude]['shape']}; "
                             f"the layer has {shape[0]} output rows.")
        m = read_tensor(weights, magnitude)
        if not np.all(np.isfinite(m)) or np.any(m < 0):
            raise InputError(f"{weights}: {module}'s lora_magnitude_vector has NaN, inf or negative entries; DoRA's "
                             "magnitudes are row norms.")
    elif magnitude is not None and not adapter.notes_dora_ignored:
        adapter.notes_dora_ignored = True
        adapter.notes.append(f"{module} has a lora_magnitude_vector but the config's use_dora is false: read as plain "
                             "LoRA, as peft would load it")
    return AdapterLayer(adapter.folder, module, a_key, b_key, rank, alpha, scale, shape, how,
                        magnitude if flags["use_dora"] else None)


class AdaptedSource(ChangeSizes, Source):
    """Rows of the adapted layer ``W + Delta W`` (``change=False``) or of a DoRA change ``W' - W`` (``change=True``),
    from the base's rows and the adapter's factors, block by block."""

    def __init__(self, layer: AdapterLayer, *, change: bool) -> None:
        from spectra_cli.sources import open_source

        if layer.base is None:
            raise InputError(f"{layer.name}: the adapted weights need the base's ({DORA_DEFINITION.split(' (')[0]}).")
        self.layer, self.change = layer, change
        self._base = open_source(layer.base)
        b = self._base.info
        if (b.n_rows, b.n_features) != layer.shape or len(b.shape) != 2:
            self._base.close()
            raise InputError(f"{layer.name} changes a {layer.shape[0]} x {layer.shape[1]} layer, but the base's "
                             f"{layer.base} has shape {list(b.shape)}.")
        self._left, self._right = layer.factors()
        self._magnitude = read_tensor(layer.weights, layer.magnitude_key) if layer.magnitude_key else None
        what = ("change " + ("W' - W (DoRA)" if layer.dora else "s B A")) if change else \
            "adapted layer W + " + ("DoRA's rescaling" if layer.dora else "s B A")
        self.info = SourceInfo(path=layer.name, format="peft adapter", shape=layer.shape, dtype="float64",
                               n_rows=layer.shape[0], n_features=layer.shape[1],
                               layout=f"{what} (rows = first axis, as the base stores the layer)",
                               key=layer.module, details={"adapter": layer.to_dict()})

    def iter_blocks(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        for _, delta, adapted in self._tally(self._pairs(start, stop, block_rows), start, stop, self.info.n_rows):
            yield (delta if self.change else adapted), None

    def _pairs(self, start: int, stop: int, block_rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(W rows, Delta W rows, W' rows)``: ``s B A``'s rows, or DoRA's rescaled rows less the base's, and the
        adapted rows themselves."""
        lo = start
        for block, _ in self._base.iter_blocks(start, stop, block_rows):
            hi = lo + block.shape[0]
            w = np.asarray(block, dtype=np.float64)
            adapted = w + self._left[lo:hi] @ self._right
            if self._magnitude is not None:
                norms = np.linalg.norm(adapted, axis=1)
                with np.errstate(divide="ignore", invalid="ignore"):
                    factor = np.where(norms > 0, self._magnitude[lo:hi] / norms, 0.0)
                adapted *= factor[:, None]
            yield w, adapted - w, adapted
            lo = hi

    def close(self) -> None:
        self._base.close()
