"""The shape of the code the issue asked for: no import cycle among the package's modules, one
short pass loop, and no dispatch on a command string in the library."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "spectra_cli"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _top_level_imports(path: Path) -> set[str]:
    """Modules a module imports when it is imported (function bodies and TYPE_CHECKING excluded)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in [node] if not isinstance(node, ast.Try) else node.body:
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("spectra_cli"):
                out.add(sub.module)
                out.update(f"{sub.module}.{a.name}" for a in sub.names)
            elif isinstance(sub, ast.Import):
                out.update(a.name for a in sub.names if a.name.startswith("spectra_cli"))
    return out


def test_no_import_cycle_among_the_modules():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {m: {i for i in _top_level_imports(p) if i in modules and i != m} for m, p in modules.items()}
    # importing a.b.c imports its packages a and a.b first
    for m in list(graph):
        graph[m] = {i for i in graph[m] if not m.startswith(i + ".")}
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


def test_the_pass_loop_is_short_and_the_library_does_not_dispatch_on_a_command():
    from spectra_cli.engine.local import run_pass

    assert len(inspect.getsource(run_pass).splitlines()) < 40
    api = (PACKAGE / "api.py").read_text()
    assert "command ==" not in api and "command in (" not in api
    assert "**options" not in api and "**options" not in (PACKAGE / "whitening.py").read_text()


def test_every_public_function_documents_its_keywords():
    import spectra_cli as spectra

    for name in ("fit", "spectrum", "isotropy", "whiten"):
        func = getattr(spectra, name)
        sig = inspect.signature(func)
        assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), name
        assert func.__doc__ and len(func.__doc__) > 200, name
