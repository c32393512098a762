"""The package's layering, enforced on the source: each module imports only from layers
below it, front ends never import each other, and heavy or native libraries are imported by
exactly the module that owns them.

    0  errors, types, paths                          stdlib only
    1  hardware, catalog, kernels, gguf_info, compat, store, prompts, theory
    2  engine, recommend, download
    3  tui, server, cli, bench                       (cli may import tui/server lazily)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "localspec"

LAYERS: dict[str, int] = {
    "localspec": 0, "localspec.__main__": 3, "localspec.errors": 0, "localspec.types": 0,
    "localspec.paths": 0, "localspec.gpus": 1,
    "localspec.hardware": 1, "localspec.catalog": 1, "localspec.kernels": 1,
    "localspec.gguf_info": 1, "localspec.compat": 1, "localspec.store": 1, "localspec.prompts": 1, "localspec.theory": 1,
    "localspec.engine": 2, "localspec.recommend": 2, "localspec.download": 2,
    "localspec.tui": 3, "localspec.server": 3, "localspec.cli": 3, "localspec.bench": 3,
}
FRONT_ENDS = ("localspec.tui", "localspec.server", "localspec.cli", "localspec.bench")
# third-party import -> the only modules allowed to import it (prefix match on module names)
OWNED = {
    "llama_cpp": ("localspec.engine.llama.backend", "localspec.engine.llama.rpc", "localspec.engine.llama.mtp",
                  "localspec.engine.llama.ext", "localspec.engine.llama.hidden"),
    "cupy": ("localspec.kernels._cuda",),
    "ctypes": ("localspec.kernels._cuda", "localspec.engine.llama.backend", "localspec.engine.llama.rpc",
               "localspec.engine.llama.mtp", "localspec.engine.llama.ext", "localspec.engine.llama.hidden"),
    "huggingface_hub": ("localspec.download",),
    "torch": ("localspec.kernels",),
    "pynvml": ("localspec.hardware",),
}
BANNED_IN_CORE = ("textual", "fastapi", "starlette", "sse_starlette", "uvicorn", "click", "typer",
                  "huggingface_hub", "rich", "pydantic", "pydantic_settings")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_key(name: str) -> str:
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS:
            return key
    raise AssertionError(f"{name} has no layer in tests/test_layering.py: add it")


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, lazy) for every import; lazy = inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, child.lineno, lazy))
            visit(child, inner)

    visit(tree, False)
    return found


SOURCES = sorted(PKG.rglob("*.py"))


def _problems(me: str, imports: list[tuple[str, int, bool]]) -> list[str]:
    """Every rule `me` breaks with these imports."""
    my_key = _layer_key(me)
    my_layer = LAYERS[my_key]
    problems = []
    for mod, line, lazy in imports:
        top = mod.split(".")[0]
        if top == "localspec":
            other_key = _layer_key(mod)
            if LAYERS[other_key] > my_layer:
                problems.append(f"line {line}: layer {my_layer} imports higher layer {mod}")
            same_front = any(me.startswith(f) and mod.startswith(f) for f in FRONT_ENDS)
            if other_key in FRONT_ENDS and not same_front and my_layer == 3:
                lazy_cli_ok = me.startswith("localspec.cli") and lazy
                if not lazy_cli_ok and other_key != my_key and me != "localspec.__main__":
                    problems.append(f"line {line}: front end {me} imports front end {mod}")
        for lib, owners in OWNED.items():
            if top == lib and not any(me == o or me.startswith(o + ".") for o in owners):
                problems.append(f"line {line}: only {owners} may import {lib}")
        if my_key in ("localspec.engine", "localspec.kernels") and top in BANNED_IN_CORE:
            problems.append(f"line {line}: {my_key} must not import {top}")
    return problems


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_module_respects_layers(path: Path) -> None:
    me = _module_name(path)
    problems = _problems(me, _imports(path))
    assert not problems, f"{me}:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "me, imported, lazy",
    [
        ("localspec.engine.loop", "textual", False),          # engine importing a UI library
        ("localspec.engine.loop", "localspec.server.app", False),  # lower layer importing higher
        ("localspec.server.app", "llama_cpp", False),          # only the backend module may
        ("localspec.engine.drafters", "llama_cpp", True),      # ... even lazily
        ("localspec.tui.app", "localspec.server.app", True),   # front ends never import each other
        ("localspec.cli.serve", "localspec.server.app", False),  # cli only lazily
        ("localspec.kernels._torch", "cupy", True),            # native CUDA only in kernels/_cuda
        ("localspec.catalog.model", "huggingface_hub", False),  # only download/ talks to the Hub
    ],
)
def test_checker_catches_violations(me: str, imported: str, lazy: bool) -> None:
    assert _problems(me, [(imported, 1, lazy)])


def test_checker_allows_the_intended_imports() -> None:
    assert _problems("localspec.engine.llama.backend", [("llama_cpp", 1, False)]) == []
    assert _problems("localspec.cli.serve", [("localspec.server.app", 1, True)]) == []
    assert _problems("localspec.tui.screens.chat", [("localspec.engine", 1, False)]) == []


def test_layering_sees_the_package() -> None:
    names = {_module_name(p) for p in SOURCES}
    assert "localspec.kernels.reference" in names and len(names) > 5


def test_the_step_loop_knows_drafters_only_through_their_protocol() -> None:
    """engine/loop.py names no drafter kind and imports no concrete drafter or policy, so new
    drafters plug in behind `Drafter` and `DraftPolicy` without touching the loop."""
    tree = ast.parse((PKG / "engine" / "loop.py").read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & {"model", "ngram", "adaptive"}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not imported & {"ModelDrafter", "PromptLookupDrafter", "NoDrafter", "AdaptivePolicy", "FixedPolicy"}
