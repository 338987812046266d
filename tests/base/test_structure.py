"""The shape of the code: no import cycle among the package's modules (imports inside functions
counted), names that say which module is which, no private name used across modules, one short
pass loop, no dispatch on a command string in the library, every option declared once, and every
command of the CLI a library function of the same name."""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import typing
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "spectra_cli"
MODULES = {p: p.relative_to(ROOT).with_suffix("") for p in PACKAGE.rglob("*.py")}


def _module_name(path: Path) -> str:
    parts = list(MODULES[path].parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per test process (three tests walk every module)."""
    return ast.parse(path.read_text())


def _statements(body: list[ast.stmt]) -> typing.Iterator[ast.stmt]:
    """Every statement in ``body`` and in the blocks inside it (functions, classes, if, try, with, loops, match),
    ``if TYPE_CHECKING:`` blocks left out (they never run). An import is a statement: the expressions, most of a
    tree, need no walk."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _statements(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _statements(inner)
        for handler in getattr(node, "handlers", ()):
            yield from _statements(handler.body)
        for case in getattr(node, "cases", ()):
            yield from _statements(case.body)


def _imports(path: Path) -> set[str]:
    """Every package module a module imports, at its top or inside any function (only ``if
    TYPE_CHECKING:`` blocks are left out: they never run)."""
    out: set[str] = set()
    for node in _statements(_tree(path).body):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("spectra_cli"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("spectra_cli"))
    return out


@functools.cache
def _graph() -> dict[str, set[str]]:
    names = {_module_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {}
    for m, p in names.items():
        deps = {i for i in _imports(p) if i in names and i != m}
        # importing a.b.c runs a/__init__ and a/b/__init__ first; a module inside a package always has its
        # package initialised before it, so an edge to its own package is no cycle
        for i in list(deps):
            parts = i.split(".")
            deps.update(".".join(parts[:k]) for k in range(1, len(parts)) if ".".join(parts[:k]) in names)
        graph[m] = {i for i in deps if not m.startswith(i + ".") and i not in ("spectra_cli", m)}
    return graph


def test_no_import_cycle_among_the_modules_counting_imports_inside_functions():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n):] + [n]))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert sum(len(v) for v in graph.values()) > 250  # the walk saw the function-level imports too


#: The floors of the package, lowest first: a module imports only from its own floor and those below.
#: A subpackage is a floor by its name; the modules at the top of the package are placed by name.
FLOORS = (
    ("base", {"version", "errors", "registry", "validate", "jsonio", "threads", "memory", "stages", "provenance",
              "documents"}),
    ("sources", {"sources"}),
    ("io", {"options", "sinks", "transform_file"}),
    ("stream", {"stream"}),
    ("eigen", {"eigen"}),
    ("analysis", {"analysis"}),
    ("results", {"results", "frames", "plot"}),
    ("run", {"run"}),
    ("capturing", {"capturing"}),  # (its callbacks log fit's numbers: above run)
    ("render", {"render"}),
    ("cli", {"cli", "__main__", ""}),
)


def _floor(module: str) -> int:
    part = module.split(".")[1] if "." in module else ""
    found = [i for i, (_, names) in enumerate(FLOORS) if part in names]
    assert len(found) == 1, f"{module} is on {'no floor' if not found else 'two floors'}"
    return found[0]


def test_every_module_is_on_a_floor_and_imports_downwards_only():
    """base -> sources -> io (options, sinks) -> stream -> eigen -> analysis -> results -> run -> render -> cli:
    every module of the package (none exempt) imports only from its floor and those below, counting imports
    inside functions."""
    graph = _graph()
    assert len(graph) == len(MODULES)
    for m, deps in graph.items():
        for dep in deps:
            assert _floor(dep) <= _floor(m), (f"{m} (floor {FLOORS[_floor(m)][0]}) imports {dep} (floor "
                                              f"{FLOORS[_floor(dep)][0]}, above it)")


def test_module_names_say_which_is_which():
    stems: dict[str, list[str]] = {}
    for rel in MODULES.values():
        stem = rel.parts[-1]
        if stem in ("__init__", "__main__"):
            continue
        assert stem not in sys.stdlib_module_names, f"{'/'.join(rel.parts)}.py shadows the standard library"
        stems.setdefault(stem.removesuffix("s"), []).append("/".join(rel.parts))
    for pkg in (p.parent for p in PACKAGE.rglob("__init__.py")):
        if pkg != PACKAGE:
            stems.setdefault(pkg.name.removesuffix("s"), []).append(str(pkg.relative_to(ROOT)) + "/")
    twins = {k: v for k, v in stems.items() if len(v) > 1}
    assert not twins, f"modules whose names differ only by plural or package: {twins}"


def test_no_private_name_is_used_across_modules():
    for path in MODULES:
        tree = _tree(path)
        own = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)}
        own |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spectra_cli"):
                bad = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not bad, f"{path}:{node.lineno} imports the private {node.module}.{bad[0]}"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                assert node.attr in own, f"{path}:{node.lineno} uses {ast.unparse(node)}, private to another module"


def test_the_pass_loop_is_short_and_the_library_does_not_dispatch_on_a_command():
    from spectra_cli.stream.local import run_pass

    assert len(inspect.getsource(run_pass).splitlines()) < 40
    for p in (PACKAGE / "run").glob("*.py"):
        text = p.read_text()
        assert "command ==" not in text and "command in (" not in text, p
        assert "locals()" not in text, p
    for name in ("matrix", "whiten", "sequence"):
        assert "**options" not in (PACKAGE / "run" / f"{name}.py").read_text(), name
    engine_compares = [str(p) for p in PACKAGE.rglob("*.py") if 'engine == "dask"' in p.read_text()]
    assert engine_compares == [str(PACKAGE / "options.py")]  # the engine is chosen in one place


def test_the_convention_is_told_apart_in_one_place():
    """``options.Convention`` says whether a fit follows WeightWatcher's convention; no module compares the raw
    string (the fit keywords' choices, analysis/suite.CONVENTIONS, are its values)."""
    import re

    from spectra_cli.analysis.fit_options import CONVENTIONS
    from spectra_cli.options import Convention

    assert tuple(Convention) == CONVENTIONS
    assert Convention.of("weightwatcher").is_weightwatcher and not Convention.of(None).is_weightwatcher
    assert Convention.of_report({"options": {"convention": "weightwatcher"}}).is_weightwatcher
    compare = re.compile(r"""[!=]=\s*["']weightwatcher["']|["']weightwatcher["']\s*[!=]=""")
    raw = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if compare.search(p.read_text()))
    assert not raw, raw


def test_every_reading_option_is_declared_once_and_reaches_every_reader():
    from spectra_cli.analysis.fit_options import FIT_KEYWORDS
    from spectra_cli.cli.flags import READ_OPTIONS
    from spectra_cli.options import READ_DEFAULTS, ReadKeywords, ReadOptions

    keys = tuple(typing.get_type_hints(ReadKeywords))
    assert keys == tuple(READ_DEFAULTS)
    assert set(keys) == set(READ_OPTIONS) and len(keys) == len(READ_OPTIONS)  # the library's and the CLI's
    for name, (_, default) in READ_OPTIONS.items():  # (--uncentered not given is None: the library's default, or
        # the one a preset sets, as the fit flags' None)
        assert default == (None if name == "centered" else READ_DEFAULTS[name]), name
    assert set(ReadOptions.__dataclass_fields__) == set(keys) - {"sample", "seed"}  # rows holds all three
    import spectra_cli as spectra

    for name in ("fit", "spectrum", "isotropy", "whiten", "accumulate", "moments", "sequence"):
        func = getattr(spectra, name)
        params = inspect.signature(func).parameters.values()
        var = [p for p in params if p.kind is p.VAR_KEYWORD]
        assert var, name
        declared = typing.get_args(typing.get_type_hints(func.__wrapped__)[var[0].name])[0]
        taken = set(typing.get_type_hints(declared))
        assert taken <= set(keys) | set(FIT_KEYWORDS), name
        assert not [p.name for p in params if p.name in taken], f"{name} re-declares a reading option"


def test_every_public_function_documents_its_keywords():
    import spectra_cli as spectra

    for name in ("fit", "spectrum", "isotropy", "whiten", "sequence", "accumulate", "moments", "batch", "check",
                 "compare", "trend", "info", "synth"):
        func = getattr(spectra, name)
        sig = inspect.signature(func)
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), name
        assert func.__doc__ and len(func.__doc__) > 200, name


def test_every_command_is_a_library_function_of_the_same_name():
    import spectra_cli as spectra
    from spectra_cli.cli import app

    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert len(names) >= 12
    for name in names:
        assert callable(getattr(spectra, name, None)), f"spectra {name} has no spectra_cli.{name}"
        assert name in spectra.__all__


def test_every_command_option_is_a_keyword_of_its_library_function():
    """The command parses, calls the function of its name with its options and renders: every option
    but the rendering ones reaches that function under the same name (``--uncentered`` as ``centered``)."""
    import spectra_cli as spectra
    from spectra_cli.cli import app

    rendering = {"json", "plot", "title", "verbose", "summary"}  # how the result is shown, not computed
    for command in app.registered_commands:
        name = command.name or command.callback.__name__
        func = getattr(spectra, name)
        params = inspect.signature(func).parameters
        accepted = {p for p, v in params.items() if v.kind is not v.VAR_KEYWORD}
        var = [v for v in params.values() if v.kind is v.VAR_KEYWORD]
        if var:
            declared = typing.get_args(typing.get_type_hints(inspect.unwrap(func))[var[0].name])[0]
            accepted |= set(typing.get_type_hints(declared))
        cli_params = list(inspect.signature(command.callback).parameters)[1:]  # after the PATH argument(s)
        for p in cli_params:
            if p in rendering:
                continue
            lib = "centered" if p == "uncentered" else p
            assert lib in accepted, f"spectra {name} --{p.replace('_', '-')} is not a keyword of spectra_cli.{name}"


def test_every_fit_option_is_declared_once_and_reaches_every_command_that_fits():
    """One typed declaration (FitKeywords) with its defaults and constraints as data, one CLI declaration
    (FIT_OPTIONS) whose help states the library's defaults, taken by fit, batch, check, compare and (its
    rank-fit part) sequence, none of which re-declares a fit keyword."""
    import re

    import spectra_cli as spectra
    from spectra_cli.analysis.fit_options import FIT_CONSTRAINTS, FIT_DEFAULTS, FitKeywords
    from spectra_cli.cli import app
    from spectra_cli.cli.flags import FIT_OPTIONS
    from spectra_cli.run.sequence import SEQUENCE_FIT

    keys = tuple(typing.get_type_hints(FitKeywords))
    assert keys == tuple(FIT_DEFAULTS) == tuple(FIT_CONSTRAINTS) == tuple(FIT_OPTIONS)
    for name, default in FIT_DEFAULTS.items():
        assert FIT_CONSTRAINTS[name](name, default) is not None or default is None, name  # defaults pass
    takes = {"fit": keys, "batch": keys, "check": keys, "compare": keys, "sequence": SEQUENCE_FIT}
    commands = {c.name or c.callback.__name__: c for c in app.registered_commands}
    for name, wanted in takes.items():
        func = inspect.unwrap(getattr(spectra, name))
        params = inspect.signature(func).parameters
        assert not set(params) & set(keys), f"{name} re-declares {set(params) & set(keys)}"
        var = [v for v in params.values() if v.kind is v.VAR_KEYWORD]
        declared = typing.get_args(typing.get_type_hints(func)[var[0].name])[0]
        assert set(keys) <= set(typing.get_type_hints(declared)), name
        cli = set(inspect.signature(commands[name].callback).parameters)
        assert cli & set(keys) == set(wanted), name
    # every literal default is written once in the package (here: WeightWatcher's healthy range)
    sources = "".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    assert len(re.findall(r"[=:] \(2\.0, 6\.0\)", sources)) == 1


def test_the_tests_are_grouped_by_floor_as_the_package_is():
    tests = ROOT / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders.discard("docs")  # the documentation's tests: no floor of the package
    assert folders <= {name for name, _ in FLOORS} and len(folders) >= 6, folders
    assert not list(tests.glob("test_*.py")) or [p.name for p in tests.glob("test_*.py")] == ["test_lint.py"]


def test_the_analyses_do_no_file_io():
    """Pure numpy in analysis/: files are read by sources/ and written by the io floor (sinks, transform_file)."""
    import re

    for path in (PACKAGE / "analysis").glob("*.py"):
        text = path.read_text()
        found = re.findall(r"\b(?:open|np\.save|np\.savez|np\.load|atomic_file|open_regular)\(", text)
        assert not found, f"{path.name} does file I/O: {found}"



def test_the_architecture_page_lists_every_module():
    """docs/architecture.md names every module, schema and template of the package (a new one is described)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    package = ROOT / "spectra_cli"
    files = [p for p in package.rglob("*") if p.suffix in (".py", ".json", ".j2") and "__pycache__" not in p.parts
             and not (p.name == "__init__.py" and p.parent != package)]
    missing = [str(p.relative_to(ROOT)) for p in files if p.name not in page]
    assert not missing, missing


def test_no_function_is_over_120_lines():
    """A function a reader can hold: none of the package's over 120 lines (docstring included)."""
    import ast

    long = []
    for path in (ROOT / "spectra_cli").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 120:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not long, long
