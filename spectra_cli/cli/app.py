"""The one Typer app, the exit codes, and the one place where errors become them:
0 success, 1 a check failed, 2 usage or input error (one ``error:`` line on stderr),
3 a bug (traceback shown). Signals (SIGTERM, SIGINT) end the run after removing any
temporary output file; a closed stdout pipe ends it quietly."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click as typer._click; older releases use click itself
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as _cx  # type: ignore[no-redef]

from spectra_cli.errors import SpectraError
from spectra_cli.version import __version__

EXIT_OK, EXIT_CHECK, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3


class _Never(Exception):
    pass


class _Signalled(BaseException):
    """SIGTERM or SIGINT arrived: unwind (finally clauses remove temporary files), then exit."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_NoArgsIsHelp: type[Exception] = getattr(_cx, "NoArgsIsHelpError", _Never)


def _on_signal(signum: int, frame: Any) -> None:
    raise _Signalled(signum)


def _quiet_broken_pipe() -> None:
    """stdout's reader went away (``| head``): exit quietly, as a Unix tool does, never as a
    failed check (exit 1). Python would complain again when flushing at exit, so point stdout
    at /dev/null first."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass
    sys.exit(128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else EXIT_OK)


class _PipeClosed(BaseException):
    """stdout's reader went away; a BaseException so that no OSError handler on the way (Typer's
    turns a broken pipe into exit 1, which means "a check failed") intercepts it."""


class SpectraGroup(TyperGroup):
    """Maps exceptions to exit codes for the entry point and for CliRunner alike."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands with their whole first sentence, wrapped at the terminal's width (Click cuts each
        to fit one line, with "...")."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, " ".join((cmd.help or "").strip().split("\n\n")[0].split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _PipeClosed() from exc

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from spectra_cli.errors import command_line_run

        command_line_run(True)  # (a batch's reports name options as flags; the library's own, as keywords)
        try:
            return self._main(*args, **kwargs)
        finally:
            command_line_run(False)

    def _main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False  # exceptions reach us; we choose the exit code
        import warnings

        from spectra_cli.errors import SpectraWarning

        # The reports carry their warnings; the CLI shows them itself (table, or stderr with --json).
        warnings.simplefilter("ignore", SpectraWarning)
        # numpy's floating-point RuntimeWarnings are not messages for a user: what is suspect in the
        # numbers is a report warning, and what cannot be computed is an error.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            rv = super().main(*args, **kwargs)
        except SpectraError as exc:
            _error(exc.for_cli())
            sys.exit(EXIT_USAGE)
        except _NoArgsIsHelp as exc:
            ctx = getattr(exc, "ctx", None)
            sys.stderr.write((ctx.get_help() if ctx is not None else str(exc)) + "\n")
            sys.exit(EXIT_USAGE)
        except _cx.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _error(exc.format_message().replace("\n", " ") + hint)
            sys.exit(EXIT_USAGE)
        except typer.Abort:
            _error("aborted")
            sys.exit(EXIT_USAGE)
        except _cx.ClickException as exc:
            _error(exc.format_message())
            sys.exit(EXIT_USAGE)
        except (BrokenPipeError, _PipeClosed):
            _quiet_broken_pipe()
        except _Signalled as exc:
            from spectra_cli.sinks import interrupted_note, remove_temporaries

            remove_temporaries()
            what = "interrupted (Ctrl-C)" if exc.signum == signal.SIGINT else f"stopped by signal {exc.signum}"
            sys.stderr.write(f"{what}: {interrupted_note()}\n")
            sys.exit(128 + exc.signum)
        except RecursionError:
            _error("input nested too deeply to read (e.g. JSON nested thousands of levels)")
            sys.exit(EXIT_USAGE)
        except OSError as exc:
            # The file system refused (an unwritable output, a vanished input): the user's to fix.
            where = f" {exc.filename}" if exc.filename else ""
            _error(f"cannot access{where}: {exc.strerror or exc}")
            sys.exit(EXIT_USAGE)
        except MemoryError:
            _error("out of memory; select fewer rows or features, or lower --block-rows")
            sys.exit(EXIT_USAGE)
        except Exception:  # noqa: BLE001 - anything else is a bug: show it
            traceback.print_exc()
            sys.stderr.write("spectra: unexpected error (a bug): please report it with the traceback above\n")
            sys.exit(EXIT_BUG)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def _error(message: str) -> None:
    sys.stderr.write(f"error: {message.strip().splitlines()[0] if message.strip() else 'failed'}\n")


app = typer.Typer(
    cls=SpectraGroup,
    name="spectra",
    help="Measure the geometry of embedding and activation matrices: covariance spectra, "
    "power-law exponents, effective ranks.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"spectra {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """spectra: covariance spectra, power laws and effective ranks of embedding matrices."""


def emit(doc: dict[str, Any], as_json: bool, render: Any = None, *, written: tuple[str, ...] = (),
         say_warnings: bool = True) -> None:
    """One strict JSON document on stdout (and each report warning as a stderr line), or the
    tables ``render(doc, console)`` draws (the report tables by default). ``written``: the files this run
    wrote, removed when stdout refuses the result (a full disk: the run failed, so it leaves nothing).
    The report's warnings name options as flags here (``--population``; the library's ``population=True``);
    ``say_warnings=False``: not repeated on stderr beside the JSON (a saved report's, said when it was made)."""
    from spectra_cli.errors import flag_text

    if isinstance(doc.get("warnings"), list):
        doc = {**doc, "warnings": [flag_text(w) if isinstance(w, str) else w for w in doc["warnings"]]}
    try:
        _emit(doc, as_json, render, say_warnings)
    except (BrokenPipeError, _PipeClosed):
        raise
    except OSError as exc:
        import contextlib

        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        from spectra_cli.errors import OutputError

        raise OutputError(f"cannot write the result to stdout ({exc.strerror or exc})"
                          f"{'; ' + ', '.join(written) + ' removed' if written else ''}.") from None


def _emit(doc: dict[str, Any], as_json: bool, render: Any = None, say_warnings: bool = True) -> None:
    if as_json:
        from spectra_cli.jsonio import dumps

        sys.stdout.write(dumps(doc) + "\n")
        sys.stdout.flush()
        # stdout stays one JSON document; a person watching the run still sees the warnings.
        for w in doc.get("warnings", []) if say_warnings and isinstance(doc.get("warnings"), list) else []:
            sys.stderr.write(f"warning: {w}\n")
        return
    from spectra_cli.render.table import console_for

    console = console_for()
    if render is None:
        from spectra_cli.render.table import print_report

        print_report(doc, console)
    else:
        render(doc, console)


#: What a stream that cannot encode a character writes instead (an ASCII terminal, PYTHONIOENCODING=ascii).
ASCII_FOR = {"·": ".", "•": "*", "—": "-", "–": "-", "…": "...", "×": "x", "≥": ">=", "≤": "<=", "≈": "~",
             "±": "+-", "→": "->", "←": "<-", "α": "alpha", "β": "beta", "λ": "lambda", "τ": "tau", "σ": "sigma",
             "μ": "mu", "²": "^2", "³": "^3", "½": "1/2", "‖": "||", "−": "-", "’": "'", "‘": "'", "“": '"', "”": '"',
             "✓": "ok", "✗": "x", "█": "#", "━": "-", "─": "-", "│": "|", "°": " deg"}


def _ascii_fallback(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(ASCII_FOR.get(ch, "?") for ch in bad), err.end


def ascii_safe_streams() -> None:
    """Where stdout or stderr cannot encode the characters spectra prints (``LANG=C``, ``PYTHONIOENCODING=ascii``),
    they write ASCII stand-ins (``alpha`` for the letter, ``-`` for a dash, ``?`` otherwise) instead of failing."""
    import codecs

    codecs.register_error("spectra-ascii", _ascii_fallback)
    for stream in (sys.stdout, sys.stderr):
        enc = getattr(stream, "encoding", None) or "ascii"
        try:
            "·•—…×≥α²".encode(enc)
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="spectra-ascii")


def _stdout_is_an_argument(args: list[str]) -> str | None:
    """The argument naming the regular file stdout is (``>> r.jsonl`` beside ``r.jsonl``), or None."""
    import stat

    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    if not stat.S_ISREG(out.st_mode):
        return None
    for arg in args:
        try:
            st = os.stat(arg)
        except (OSError, ValueError):
            continue
        if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino):
            return arg
    return None


def main() -> None:
    """Console-script entry point."""
    if sys.stderr is None:  # (closed: 2>&-) messages go nowhere, the run goes on
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115  (for the whole run)
    if sys.stdout is None:  # (closed: >&-) the result has nowhere to go: said, exit 2, before any work
        sys.stderr.write("error: stdout is closed: the result has nowhere to go (redirect it to a file).\n")
        raise SystemExit(2)
    named = _stdout_is_an_argument(sys.argv[2:])
    if named is not None:  # (spectra check r.jsonl --json >> r.jsonl: the result would be written into its input)
        sys.stderr.write(f"error: stdout is {named}, a file this command reads; write the result elsewhere.\n")
        raise SystemExit(2)
    ascii_safe_streams()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    # Typer builds every registered command's parameters at each start (~10 ms a command); a run of
    # one command only needs that one. Top-level help and unknown names still see them all.
    name = sys.argv[1] if len(sys.argv) > 1 else None
    names = {c.name or getattr(c.callback, "__name__", "") for c in app.registered_commands}
    if name in names:
        app.registered_commands = [c for c in app.registered_commands
                                   if (c.name or getattr(c.callback, "__name__", "")) == name]
    app()
