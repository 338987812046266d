"""Capture a model's activations as they are made: forward hooks that stream every matching module's output
into mergeable moments on the activations' own device (:mod:`spectra_cli.capturing.device`).

Which modules: ``modules`` is a glob when it has no regular-expression syntax (``*`` one dotted part of a name,
``?`` one character; matched against the whole qualified name or a dotted tail of it, so ``encoder.layer.*``
takes each layer and none of their sub-modules), else a regular expression searched in the name (``re.search``,
as ``batch --tensors``). Which tensor: the output itself, the first element of a tuple, or the
``last_hidden_state`` of a model output; ``output=`` names another attribute or an index. Which rows: every
position of a ``(batch, positions, d)`` output whose attention mask is non-zero (the mask is read from the
model call's ``attention_mask`` keyword by a forward pre-hook on the model, or given by ``mask=`` as a function
of the call's arguments), optionally only ``positions`` (``"1:"`` leaves out a CLS token); a ``(rows, d)``
output is taken whole. Hooks are removed when the ``with`` block ends, also on an exception.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from spectra_cli.capturing.device import DeviceMoments
from spectra_cli.errors import InputError, OptionError, OutputError, param
from spectra_cli.options import gib, memory_budget, parse_bytes, physical_memory, refuse_over_budget
from spectra_cli.sinks import check_replaceable
from spectra_cli.stream.accumulator import Accumulator
from spectra_cli.validate import (
    MAX_PATTERN,
    MAX_STEP,
    PRECISIONS,
    check_bool,
    check_choice,
    check_int,
    check_path,
    check_regex,
)

_REGEX_SYNTAX = set("\\^$+(){}|")
#: The most row groups a capture keeps (each a d x d float64 matrix on the device).
MAX_GROUPS = 256


def module_matcher(pattern: str) -> Callable[[str], bool]:
    """The test a qualified module name must pass (see the module docstring: a glob, else a regex), run by RE2 in
    time linear in the name (:func:`spectra_cli.validate.check_regex`), the glob's translation too (``*`` is
    ``[^.]*``: twenty of them in a row backtrack in Python's ``re``)."""
    if not isinstance(pattern, str) or not pattern:
        raise OptionError(f"{param('modules', pattern, show=True)} must be a non-empty glob or regular expression "
                          "of module names (e.g. 'encoder.layer.*').")
    if len(pattern) > MAX_PATTERN:
        raise OptionError(f"{param('modules', pattern[:40] + '...')} is a pattern of {len(pattern):,} characters; at "
                          f"most {MAX_PATTERN:,} are allowed.")
    if not (_REGEX_SYNTAX & set(pattern)):
        glob = check_regex("modules", rf"(?:^|\.){_glob_body(pattern)}$")
        return lambda name: glob.search(name) is not None
    rx = check_regex("modules", pattern)
    return lambda name: rx.search(name) is not None


def _glob_body(pattern: str) -> str:
    """A glob as a regex: ``*`` any run within one dotted part, ``?`` one character of it, ``[...]`` a class."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        close = pattern.find("]", i + 2) if ch == "[" else -1
        if ch == "*":
            out.append("[^.]*")
        elif ch == "?":
            out.append("[^.]")
        elif close > 0:
            inner = pattern[i + 1:close]
            out.append("[" + ("^" + re.escape(inner[1:]).replace("\\-", "-") if inner.startswith("!") else
                              re.escape(inner).replace("\\-", "-")) + "]")
            i = close
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _positions(spec: str | None) -> slice | None:
    if spec is None:
        return None
    m = re.fullmatch(r"\s*(-?\d{1,9})?\s*:\s*(-?\d{1,9})?\s*", str(spec))
    if not m:
        raise OptionError(f"{param('positions', spec)} must be a range of positions 'K1:K2' (either end may be "
                          "left out, e.g. '1:' to leave out a CLS token).")
    a, b = (int(v) if v is not None else None for v in m.groups())
    if a is not None and b is not None and (a >= 0) == (b >= 0) and a >= b:
        raise OptionError(f"{param('positions', spec)} selects no position (K2 must be past K1).")
    return slice(a, b)


#: The keywords a training callback passes on to :class:`Capture`.
CAPTURE_OPTIONS = ("groups", "precision", "mask", "weights", "output", "positions", "drop_nonfinite", "max_memory")


def moments_bytes(widths: list[int], groups: int) -> int:
    """About the bytes a capture of modules of these output widths takes: each module's state on the device
    (``max(groups, 1)`` float64 ``d x d`` matrices), and one module's transfer to the host at a time (its packed
    copy, the host's copy and the accumulator made from it: about ``3 (groups + 1)`` more)."""
    if not widths:
        return 0
    top = max(widths)
    return sum(8 * d * d * max(groups, 1) for d in widths) + 3 * 8 * top * top * (groups + 1)


def module_width(module: Any, default: int | None = None) -> int | None:
    """The output width of a module where its attributes say it (a linear layer's ``out_features``, an
    embedding's ``embedding_dim``, a norm's ``normalized_shape``), else that of its last sub-module that says it (a
    transformer layer ends in its output projection), else ``default``: the sizing before any call; the hooks
    check again with the widths the calls return."""
    for m in reversed(list(module.modules())):
        for attr in ("out_features", "embedding_dim"):
            v = getattr(m, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        shape = getattr(m, "normalized_shape", None)
        if isinstance(shape, tuple | list) and shape and isinstance(shape[-1], int) and shape[-1] > 0:
            return int(shape[-1])
    return default


def check_keywords(*, modules: str, groups: int, precision: str, mask: Any, output: Any, positions: str | None,
                   drop_nonfinite: bool, weights: Any, max_memory: int | str | None) -> dict[str, Any]:
    """Every keyword of a capture checked (before any model is loaded or hooked): the values :class:`Capture`
    keeps, with ``match`` (the module test), ``positions`` as a slice and ``budget`` in bytes."""
    groups = check_int("groups", groups, minimum=0)
    if groups > MAX_GROUPS:
        raise OptionError(f"{param('groups', groups)} must be at most {MAX_GROUPS} (each keeps a d x d matrix on "
                          "the device; 32 serve --ci and --population).")
    precision = check_choice("precision", precision, PRECISIONS)
    drop_nonfinite = check_bool("drop_nonfinite", drop_nonfinite)
    if not (mask is None or (isinstance(mask, str) and mask == "auto") or callable(mask)):
        raise OptionError(f"{param('mask', mask, show=True)} must be 'auto' (the call's attention_mask), None, or "
                          "a function of the call's (args, kwargs) that returns the mask.")
    if weights is not None and not callable(weights):
        raise OptionError(f"{param('weights', weights, show=True)} must be a function of the model call's (args, "
                          "kwargs) that returns each token's weight, shaped like the attention mask.")
    if output is not None and (isinstance(output, bool) or not isinstance(output, str | int)):
        raise OptionError(f"{param('output', output, show=True)} must be an attribute name or an index.")
    return {"match": module_matcher(modules), "groups": groups, "precision": precision, "mask": mask,
            "output": output, "positions": _positions(positions), "drop_nonfinite": drop_nonfinite,
            "weights": weights,
            # (what the moments and the model may take, never past the machine's memory: a budget of 1 TB on a
            # 24 GB machine got the process killed rather than refused)
            "budget": min(memory_budget(parse_bytes(max_memory)), physical_memory())}


def check_capture_options(options: dict[str, Any]) -> dict[str, Any]:
    """A callback's further keywords, refused at once when :class:`Capture` takes no such keyword."""
    unknown = sorted(set(options) - set(CAPTURE_OPTIONS))
    if unknown:
        raise OptionError(f"{', '.join(param(k) for k in unknown)}: not a keyword of spectra_cli.capture in a "
                          f"training callback (these are: {', '.join(CAPTURE_OPTIONS)}).")
    return dict(options)


class Capture:
    """The moments of every matching module's output, fed by forward hooks (made by :func:`spectra_cli.capture`).

    ``cap[name]`` is a module's :class:`~spectra_cli.stream.accumulator.Accumulator` (every rank's, merged);
    :meth:`save` writes one moment file per module. Under ``torch.distributed`` both are collective: every rank
    calls them, in the same order.
    """

    def __init__(self, model: Any, *, modules: str, groups: int = 0, precision: str = "float32",
                 mask: str | Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = "auto",
                 output: str | int | None = None, positions: str | None = None,
                 drop_nonfinite: bool = False,
                 weights: Callable[[tuple[Any, ...], dict[str, Any]], Any] | None = None,
                 max_memory: int | str | None = None) -> None:
        try:
            import torch
        except ImportError:  # pragma: no cover - the capture extra is not installed
            raise InputError("capture needs PyTorch: pip install 'spectra-geometry[capture]' (the CPU wheel: "
                             "pip install "
                             "torch --index-url https://download.pytorch.org/whl/cpu).") from None
        if not isinstance(model, torch.nn.Module):
            raise OptionError(f"{param('model')} must be a torch.nn.Module (got {type(model).__name__}).")
        kw = check_keywords(modules=modules, groups=groups, precision=precision, mask=mask, output=output,
                            positions=positions, drop_nonfinite=drop_nonfinite, weights=weights,
                            max_memory=max_memory)
        groups, precision, drop_nonfinite, match = kw["groups"], kw["precision"], kw["drop_nonfinite"], kw["match"]
        names = [n for n, _ in model.named_modules() if n and match(n)]
        if not names:
            every = [n for n, _ in model.named_modules() if n]
            raise InputError(f"{param('modules', modules[:80])} matches none of the model's {len(every)} modules (e.g. "
                             f"{', '.join(every[:6]) or 'none'}); a glob such as 'encoder.layer.*' takes each layer.")
        self.budget = kw["budget"]
        mods = dict(model.named_modules())
        hidden = getattr(getattr(model, "config", None), "hidden_size", None)
        widths = [module_width(mods[n], hidden if isinstance(hidden, int) and hidden > 0 else None) for n in names]
        known = [w for w in widths if w is not None]
        refuse_over_budget("capture", f"{len(known)} module(s) of width up to {max(known, default=0):,} with "
                           f"groups={groups}", moments_bytes(known, groups),
                           "each module's d x d moments, one per row group", self.budget,
                           fewer=f"capture fewer modules or fewer {param('groups')}")
        self.model_name = type(model).__name__
        self.modules = tuple(names)
        self.groups, self.precision, self.output = groups, precision, output
        self.positions = kw["positions"]
        self.drop_nonfinite = drop_nonfinite
        self.n_dropped = {n: 0 for n in names}
        self.calls = 0
        self.saved: list[str] = []  # the files the last save wrote (rank 0)
        self.saved_by_module: dict[str, str] = {}  # the same, by module
        self.texts_read = self.tokens_read = 0  # (a capture that ran the model over texts itself)
        self._mask_rule = mask
        self._mask: Any = None
        self._weight_rule = weights
        self._weights: Any = None
        self._states: dict[str, DeviceMoments] = {}
        self._handles: list[Any] = []
        self._since: int | None = None
        param_ = next(model.parameters(), None)
        self._device = param_.device if param_ is not None else torch.device("cpu")
        self._depth = 0
        if mask is not None or weights is not None:
            # the mask is read where the model is called, whichever ancestor of the captured modules that is (the
            # model itself, or the model inside a LightningModule), at the outermost hooked call, and forgotten when
            # that call returns (also on an exception): a captured module called directly gets no mask
            ancestors = {".".join(n.split(".")[:k]) for n in names for k in range(len(n.split(".")))}
            for a in sorted(ancestors):
                if a in mods:
                    self._handles.append(mods[a].register_forward_pre_hook(self._pre_hook, with_kwargs=True))
                    self._handles.append(mods[a].register_forward_hook(self._post_hook, always_call=True))
        for n in names:
            self._handles.append(mods[n].register_forward_hook(self._hook(n)))

    # -- hooks -----------------------------------------------------------------------------------
    def _pre_hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._depth += 1
        if self._depth == 1 and self._weight_rule is not None:
            try:
                self._weights = self._weight_rule(args, kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's function: its failure is theirs, said in one line
                self._depth -= 1
                raise InputError(f"the {param('weights')} function failed on a call of the model: "
                                 f"{type(exc).__name__}: {exc}") from None
        rule = self._mask_rule
        if rule is None:
            if self._depth == 1:
                self.calls += 1
            return
        if rule == "auto":
            # the first (batch, positions) mask of this outermost call, from whichever hooked ancestor takes it (the
            # model inside a wrapper; an inner module's 4-D additive mask is not one)
            if self._depth == 1:
                self.calls += 1
            if self._mask is not None:
                return
            m = kwargs.get("attention_mask")
            if m is None and args:  # (passed by position: bound to the call's signature)
                try:
                    m = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments.get("attention_mask")
                except (TypeError, ValueError):
                    m = None
            if m is not None and getattr(m, "ndim", 2) == 2:
                self._mask = m
        elif self._depth == 1:
            self.calls += 1
            try:
                self._mask = rule(args, kwargs)  # type: ignore[operator,misc]
            except Exception as exc:  # noqa: BLE001 - the user's function: its failure is theirs, said in one line
                self._depth -= 1  # (the call does not happen: no post-hook comes)
                raise InputError(f"the {param('mask')} function failed on call {self.calls}: "
                                 f"{type(exc).__name__}: {exc}") from None

    def _post_hook(self, module: Any, args: Any, out: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth == 0:
            self._mask = self._weights = None

    def _tensor(self, name: str, out: Any) -> Any:
        import torch

        if self.output is not None:
            if isinstance(out, torch.Tensor) and isinstance(self.output, int):
                raise InputError(f"module {name!r} returns a tensor: {param('output', self.output)} would index its "
                                 "batch; output= picks from a tuple or a model output (leave it out here).")
            try:
                out = out[self.output] if isinstance(self.output, int) else getattr(out, self.output)
            except (AttributeError, IndexError, KeyError, TypeError):
                raise InputError(f"module {name!r}: its output ({type(out).__name__}) has no "
                                 f"{param('output', self.output)}.") from None
        elif not isinstance(out, torch.Tensor):
            hidden = getattr(out, "last_hidden_state", None)
            if isinstance(hidden, torch.Tensor):
                out = hidden
            elif isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
                out = out[0]
        if not isinstance(out, torch.Tensor):
            raise InputError(f"module {name!r} returns {type(out).__name__}, not a tensor: choose one with "
                             f"{param('output')} (an attribute name or an index), or a module that returns a tensor.")
        if not (out.is_floating_point() and out.ndim >= 2):
            raise InputError(f"module {name!r} returns a tensor of shape {tuple(out.shape)} and dtype {out.dtype}; "
                             "rows of floating-point features (2 or more dimensions) are required.")
        return out

    def _rows(self, name: str, out: Any) -> tuple[Any, Any]:
        """The rows of a module's output (masked, the positions kept) and their weights (None unweighted)."""
        import torch

        t = self._tensor(name, out)
        w = None
        if self._weight_rule is not None:
            if self._weights is None:
                raise InputError(f"module {name!r} ran outside a call of the model: its rows have no {param('weights')}"
                                 " (they are read at each call of the model).")
            try:
                w = torch.as_tensor(self._weights, device=t.device).to(torch.float64)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise InputError(f"module {name!r}: the weights are not a tensor of numbers: {exc}") from None
            want = tuple(t.shape[:2]) if t.ndim == 3 else (t.reshape(-1, t.shape[-1]).shape[0],)
            if tuple(w.shape) != want:
                raise InputError(f"module {name!r}: the weights have shape {tuple(w.shape)}, its output "
                                 f"{tuple(t.shape)}; weights of shape {want} are required.")
            if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
                raise InputError(f"module {name!r}: the weights hold a negative, NaN or infinite value; they must be "
                                 "finite and >= 0.")
        if t.ndim == 3:
            mask = self._mask
            if self.positions is not None:
                t = t[:, self.positions]
                mask = mask[:, self.positions] if mask is not None and getattr(mask, "ndim", 0) == 2 else mask
                w = w[:, self.positions] if w is not None else None
            if mask is not None:
                try:
                    mask = torch.as_tensor(mask, device=t.device)
                except (TypeError, ValueError, RuntimeError) as exc:
                    raise InputError(f"module {name!r}: the attention mask ({type(self._mask).__name__}) is not a "
                                     f"tensor of numbers: {exc}") from None
                if tuple(mask.shape) != tuple(t.shape[:2]):
                    raise InputError(f"module {name!r}: the attention mask has shape {tuple(mask.shape)}, its output "
                                     f"{tuple(t.shape)}; a mask of shape (batch, positions) = {tuple(t.shape[:2])} "
                                     "is required.")
                keep = mask > 0.5 if mask.is_floating_point() else mask != 0  # (a NaN is no token)
                return t[keep], (w[keep] if w is not None else None)
            return t.reshape(-1, t.shape[-1]), (w.reshape(-1) if w is not None else None)
        return t.reshape(-1, t.shape[-1]), w

    def _hook(self, name: str) -> Callable[[Any, Any, Any], None]:
        def hook(module: Any, args: Any, out: Any) -> None:
            import torch

            with torch.no_grad():
                X, w = self._rows(name, out)
                if X.is_meta:
                    raise InputError(f"module {name!r} runs on the meta device: its outputs hold no values to "
                                     "capture (load the weights first).")
                finite = torch.isfinite(X).all(dim=1)
                if not bool(finite.all()):
                    if not self.drop_nonfinite:
                        bad = int((~finite).sum())
                        raise InputError(f"module {name!r} produced {bad} row(s) with NaN or infinite values (call "
                                         f"{self.calls}); pass drop_nonfinite=True to leave such rows out.")
                    self.n_dropped[name] += int((~finite).sum())
                    X = X[finite]
                    w = w[finite] if w is not None else None
                st = self._states.get(name)
                if st is None:
                    st = self._states[name] = self._new_state(name, int(X.shape[1]), X.device)
                elif X.shape[1] != st.d:
                    raise InputError(f"module {name!r} returned rows of {X.shape[1]} features after {st.d} in earlier "
                                     "calls; the width of a captured module must not change.")
                st.update(X, w)

        return hook

    def _new_state(self, name: str, d: int, device: Any) -> DeviceMoments:
        """A module's moments, sized against the budget with every width seen so far before they are allocated."""
        widths = [st.d for st in self._states.values()] + [d]
        others = f", beside {len(widths) - 1} other module(s)," if len(widths) > 1 else ""
        refuse_over_budget("capture", f"module {name!r} (width {d:,}){others} with groups={self.groups}",
                           moments_bytes(widths, self.groups),
                           "each module's d x d moments, one per row group", self.budget,
                           fewer=f"capture fewer modules or fewer {param('groups')}")
        try:
            return DeviceMoments(d, device=device, groups=self.groups, precision=self.precision, name=name,
                                 weighted=self._weight_rule is not None)
        except (RuntimeError, MemoryError) as exc:  # (the device has less than the budget says)
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise InputError(f"capture: the moments of module {name!r} (width {d:,}, groups={self.groups}: about "
                             f"{gib(moments_bytes([d], self.groups))}) do not fit on {device} ({first}); capture "
                             f"fewer modules or fewer {param('groups')}.") from None

    # -- context -----------------------------------------------------------------------------------
    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook (the moments are kept)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._mask = None

    @property
    def active(self) -> bool:
        return bool(self._handles)

    # -- results ------------------------------------------------------------------------------------
    def rows(self, name: str) -> int:
        """Rows captured from ``name`` on this process (since the last reset)."""
        st = self._states.get(name)
        return st.n if st is not None else 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def __getitem__(self, name: str) -> Accumulator:
        return self.accumulator(name)

    def accumulator(self, name: str, *, step: int | None = None) -> Accumulator:
        """Module ``name``'s moments as a host accumulator: every rank's merged (collective under
        ``torch.distributed``)."""
        if name not in self.modules:
            raise OptionError(f"{name[:80]!r} is not a captured module; these are: {', '.join(self.modules[:8])}"
                              f"{', ...' if len(self.modules) > 8 else ''}.")
        if name not in self._seen()[0]:
            raise InputError(f"module {name!r} saw no rows: nothing to read (no forward call reached it).")
        return self._accumulator(name, step)

    def _accumulator(self, name: str, step: int | None) -> Accumulator:
        src = {"capture": name, "model": self.model_name, "step": step, "since_step": self._since,
               "dropped_nonfinite": self.n_dropped[name]}
        acc = self._states[name].accumulator(sources=[src])
        acc.n_dropped = self.n_dropped[name]
        return acc

    def _seen(self) -> tuple[list[str], dict[str, int]]:
        """The modules that saw a row on any rank, and their widths (one collective under ``torch.distributed``,
        so that every rank then gathers the same modules); a rank where such a module saw nothing takes part with
        an empty state."""
        import torch

        rows = torch.tensor([[float(self.rows(n)), float(self._states[n].d if n in self._states else 0)]
                             for n in self.modules], dtype=torch.float64, device=self._device)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            total = rows[:, 0].clone()
            width = rows[:, 1].clone()
            dist.all_reduce(total)
            dist.all_reduce(width, op=dist.ReduceOp.MAX)
        else:
            total, width = rows[:, 0], rows[:, 1]
        seen = [n for n, t in zip(self.modules, total.tolist(), strict=True) if t > 0]
        widths = {n: int(w) for n, w in zip(self.modules, width.tolist(), strict=True)}
        for n in seen:
            if n not in self._states:
                self._states[n] = DeviceMoments(widths[n], device=self._device, groups=self.groups,
                                                precision=self.precision, name=n,
                                                weighted=self._weight_rule is not None)
        return seen, widths

    def save(self, folder: str | os.PathLike[str], *, step: int | None = None, reset: bool = False) -> list[str]:
        """One moment file per module that saw rows: ``folder/<module>.npz``, or with ``step``,
        ``folder/step_<step>/<module>.npz`` (a run that ``batch``, ``trend``, ``report`` and ``check --baseline`` read
        by that step); a module that saw no row since the last reset (a conditional branch, an idle expert) is left
        out. Collective under ``torch.distributed``: every rank calls it; rank 0 writes, the others write nothing
        (their list is empty). ``reset``: the next snapshot holds only the rows since this one (else they are
        cumulative). Refused when no module saw a row."""
        reset = check_bool("reset", reset)
        target, paths = self.plan(folder, step=step)
        seen, _ = self._seen()
        if not seen:
            raise InputError("no captured module saw a row since the last snapshot: nothing to save (run the model "
                             "inside the capture).")
        writer = _rank() == 0
        written: dict[str, str] = {}
        if writer:
            try:
                os.makedirs(target, exist_ok=True)
            except OSError as exc:
                raise OutputError(f"{param('folder', folder)}: cannot make {target} ({exc.strerror}).") from None
        for name in seen:  # (one module's host copy at a time; every rank: collective)
            acc = self._accumulator(name, step)
            if writer:
                written[name] = acc.save(paths[name])
            del acc
        if reset:
            for st in self._states.values():
                st.reset()
            self._since = step
        self.saved, self.saved_by_module = list(written.values()), written
        return self.saved

    def plan(self, folder: str | os.PathLike[str], *, step: int | None = None,
             flag: str = "folder") -> tuple[str, dict[str, str]]:
        """Where :meth:`save` writes: the snapshot's folder and each module's file (:func:`file_name`), checked
        before anything is written (``flag`` names the option in messages): the folder is not a file, no two
        modules share a file (also on a file system that folds case), and no module's file is a directory, a FIFO
        or a file other than an earlier moment file."""
        root, target = snapshot_folder(folder, step, flag)
        paths = {name: os.path.join(target, f"{file_name(name)}.npz") for name in self.modules}
        by_file: dict[str, str] = {}
        for name, path in paths.items():
            other = by_file.setdefault(path.casefold(), name)
            if other != name and (paths[other] == path or _folds_case(target)):
                raise OutputError(f"{param(flag, root)}: modules {other[:80]!r} and {name[:80]!r} would be written to "
                                  f"one file ({path}); capture one of them at a time.")
            check_replaceable(path, flag)
        return target, paths

    def __repr__(self) -> str:
        return (f"Capture({self.model_name}, {len(self.modules)} modules, groups={self.groups}, "
                f"precision={self.precision!r}, {'active' if self.active else 'closed'})")


def snapshot_folder(folder: Any, step: int | None, flag: str = "folder") -> tuple[str, str]:
    """``(folder, the snapshot's folder)``: ``folder``, or with ``step`` its ``step_<step>``, each a folder or not
    there yet (it is made), and the step a training step (``flag`` names the option in messages)."""
    if step is not None:
        step = check_int("step", step, minimum=0, maximum=MAX_STEP)
    root = check_path(flag, folder)
    if os.path.lexists(root) and not os.path.isdir(root):
        raise OutputError(f"{param(flag, root)} exists and is not a directory; name a folder for the moment "
                          "files (it is made when missing).")
    target = os.path.join(root, f"step_{step}") if step is not None else root
    if os.path.lexists(target) and not os.path.isdir(target):
        raise OutputError(f"{param(flag, root)}: {target} exists and is not a directory; the snapshot of step "
                          f"{step} is written into a folder of that name.")
    return root, target


#: The characters a module's file name keeps as they are; every other one is written as ``%XX``.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
#: The longest file stem written; a longer one is cut and ends in ``~`` and 16 hex digits of the name's SHA-256.
MAX_STEM = 200


def file_name(module: str) -> str:
    """A module's file stem, one for each name: its qualified name with every character other than letters,
    digits, ``.``, ``_`` and ``-`` written as ``%XX``, its UTF-8 bytes in hex (``%`` itself too, and a leading
    ``.``, which would hide the file): ``a b`` is ``a%20b``, ``a/b`` is ``a%2Fb``, ``é`` is ``%C3%A9``, ``a_b`` stays.
    A stem over :data:`MAX_STEM` characters keeps its first 183 and ends in ``~`` and 16 hex digits of the name's
    SHA-256 (``~`` is never kept as itself, so a cut stem is no other name's whole one)."""
    import hashlib

    out = "".join(ch if ch in _SAFE and not (i == 0 and ch == ".") else
                  "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")) for i, ch in enumerate(module))
    if len(out) > MAX_STEM:
        digest = hashlib.sha256(module.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        out = f"{out[:MAX_STEM - 17]}~{digest}"
    return out


def _folds_case(folder: str) -> bool:
    """Whether the file system of ``folder`` (or of its nearest existing parent) folds case: a probe file's name in
    the other case names it too."""
    import tempfile

    probe = os.path.abspath(folder)
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe)
    try:
        with tempfile.NamedTemporaryFile(prefix="spectra-case-probe-", dir=probe) as f:
            return os.path.exists(os.path.join(probe, os.path.basename(f.name).upper()))
    except OSError:
        return True  # (cannot tell: two names that differ only in case are refused)


def _rank() -> int:
    import torch

    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class Snapshots:
    """What a training callback does (the Hugging Face ``Trainer``'s and Lightning's adapters share it): a
    :class:`Capture` from the start of training, a snapshot every ``every`` steps and at the end
    (``folder/step_<step>/<module>.npz``; none when no module saw a row since the last), the hooks removed at
    the end, on an exception, or when training starts again. Its keywords are checked at once."""

    def __init__(self, folder: str | os.PathLike[str], *, modules: str, every: int = 500, reset: bool = True,
                 **options: Any) -> None:
        snapshot_folder(folder, None)  # (a folder, or none yet: said now, not after `every` training steps)
        self.folder, self.modules, self.options = folder, modules, check_capture_options(options)
        self.reset = check_bool("reset", reset)
        self.every = check_int("every", every, minimum=1)
        module_matcher(modules)
        self.capture: Capture | None = None
        self.saved: list[str] = []
        #: The latest snapshot's files by module (rank 0; empty on the others, and when nothing was written)
        self.latest: dict[str, str] = {}
        self._last = -1

    def start(self, model: Any) -> None:
        self.stop()  # (training started again after a failure: the old hooks go first)
        self.capture = Capture(model, modules=self.modules, **self.options)

    def step(self, step: int) -> bool:
        """A snapshot when ``step`` is one of the schedule's; whether one was written."""
        return bool(step and step % self.every == 0) and self.snapshot(step)

    def snapshot(self, step: int) -> bool:
        """A snapshot of ``step`` (once a step); whether it wrote files (:attr:`latest` holds them)."""
        self.latest = {}
        if self.capture is None or step == self._last:
            return False
        self._last = step
        with contextlib.suppress(InputError):  # (no module saw a row since the last one: nothing to write)
            self.saved += self.capture.save(self.folder, step=step, reset=self.reset)
            self.latest = dict(self.capture.saved_by_module)
        return bool(self.latest)

    def stop(self) -> None:
        if self.capture is not None:
            self.capture.close()
