"""The shape of ebpfkit, checked by reading its source (an AST walk; no kernel, no imports of
the checked modules): libbpf's ctypes layer stays inside the engine (tests and benchmarks use
the engine's API too), tools do not import each other, and only the output layer (and the
CLI entry) prints or looks at the output format. Each failure lists the offending file:line."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import ebpfkit
from ebpfkit.tools import TOOLS

PACKAGE = Path(ebpfkit.__file__).parent
ROOT = PACKAGE.parent
# top-level packages that serve every tool (vm/ is the VM harness the pytest plugin uses too;
# its tool is ebpfkit/tools/vm/); every tool is a package ebpfkit/tools/<tool>/, and the modules
# of ebpfkit/tools/ itself (the registry, common CLI plumbing) serve them all
SHARED_LAYERS = {"engine", "output", "net", "sysinfo", "policy", "vm", "programs", "bcc"}
# packages that consume tools as the CLI does (their sessions), with a command in the registry:
# no tool imports them, and they import no tool's command module
CONSUMERS = {"exporter"}
CLI_ENTRY = {"ebpfkit.cli", "ebpfkit.__main__"}
PRINT_CALLS = {"print", "click.echo", "click.secho"}
STD_STREAMS = {"stdout", "stderr"}


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. ebpfkit.tools.xdp.cli
    path: Path
    tree: ast.Module

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(ROOT)}:{node.lineno}"

    def within(self, *prefixes: str) -> bool:
        return any(_under(self.name, p) for p in prefixes)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _modules() -> list[Module]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append(Module(".".join(parts), path, ast.parse(path.read_text(), str(path))))
    return found


MODULES = _modules()


def _package_of(module: Module) -> str:
    """The package a relative import in ``module`` starts from."""
    return module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]


def _imports(module: Module):
    """(node, dotted name) for everything ``module`` imports, relative imports resolved; for
    ``from X import y`` both X and X.y (y may be a submodule)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package_of(module).split(".")
                anchor = ".".join(package[:len(package) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            yield node, base
            for alias in node.names:
                yield node, f"{base}.{alias.name}"
        elif (isinstance(node, ast.Call) and _dotted(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            yield node, node.args[0].value


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a Name/Attribute chain, "" otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def _fail_with(offences: list[str], rule: str) -> None:
    if offences:
        by_place = sorted(set(offences), key=lambda o: (o.split(":")[0], int(o.split(":")[1])))
        pytest.fail(f"{rule}:\n  " + "\n  ".join(by_place), pytrace=False)


# --- tools ---

def _tool_prefixes() -> dict[str, tuple[str, ...]]:
    """Each registered tool's modules: its package, ebpfkit/tools/<tool>/."""
    return {name: (f"ebpfkit.tools.{name}",) for name in TOOLS if name not in CONSUMERS}


TOOL_PREFIXES = _tool_prefixes()


def _tool_of(dotted: str) -> str | None:
    for tool, prefixes in TOOL_PREFIXES.items():
        if any(_under(dotted, p) for p in prefixes):
            return tool
    return None


def test_the_walk_sees_the_tools_and_layers():
    """The rules below are only as good as what they look at."""
    names = {m.name for m in MODULES}
    for info in TOOLS.values():
        assert info.module in names, f"registry names {info.module}, which is not in {PACKAGE}"
    for name, info in TOOLS.items():
        package = f"ebpfkit.{name}" if name in CONSUMERS else f"ebpfkit.tools.{name}"
        assert _under(info.module, package), f"{info.module} is outside its package"
        assert (ROOT / package.replace(".", "/") / "__init__.py").exists(), f"{package} is not a package"
    strays = sorted(p.name for p in PACKAGE.iterdir()
                    if (p / "__init__.py").exists() and p.name not in SHARED_LAYERS | CONSUMERS | {"tools"})
    assert not strays, f"packages outside ebpfkit/tools/ that are neither tool nor layer: {strays}"
    assert "ebpfkit.engine._libbpf" in names
    for layer in SHARED_LAYERS - {"programs"}:
        assert f"ebpfkit.{layer}" in names, f"shared layer ebpfkit/{layer} is gone: update SHARED_LAYERS"


def test_only_the_engine_imports_libbpf():
    offences = [f"{m.where(node)}: imports {name}"
                for m in MODULES if not m.within("ebpfkit.engine")
                for node, name in _imports(m) if _under(name, "ebpfkit.engine._libbpf")]
    _fail_with(offences, "outside ebpfkit/engine, use the engine's API instead of _libbpf")


def _tests_and_benchmarks() -> list[Module]:
    return [Module(".".join(path.relative_to(ROOT).with_suffix("").parts), path,
                   ast.parse(path.read_text(), str(path)))
            for top in ("tests", "benchmarks") for path in sorted((ROOT / top).rglob("*.py"))]


def test_tests_and_benchmarks_do_not_import_libbpf():
    offences = [f"{m.where(node)}: imports {name}"
                for m in _tests_and_benchmarks()
                for node, name in _imports(m) if _under(name, "ebpfkit.engine._libbpf")]
    _fail_with(offences, "tests and benchmarks use the engine's public API (inventory, FdMap, "
                         "Program.test_run, ...), not _libbpf")


def test_no_tool_imports_another():
    offences = []
    for m in MODULES:
        own = _tool_of(m.name)
        if own is None:
            continue
        for node, name in _imports(m):
            other = _tool_of(name)
            if other is not None and other != own:
                offences.append(f"{m.where(node)}: tool {own} imports {name} (tool {other})")
    _fail_with(offences, "tools never import each other: move what they share into a shared layer")


def test_consumers_stand_apart_from_the_tools():
    """A consumer (the exporter) uses tools' sessions, never their commands; nothing below it
    (a tool, a layer) imports it."""
    offences = []
    for m in MODULES:
        inside = next((c for c in CONSUMERS if m.within(f"ebpfkit.{c}")), None)
        for node, name in _imports(m):
            tool = _tool_of(name)
            if inside and tool and _under(name, f"ebpfkit.tools.{tool}.cli"):
                offences.append(f"{m.where(node)}: consumer {inside} imports {name}, a tool's command")
            used = next((c for c in CONSUMERS if _under(name, f"ebpfkit.{c}")), None)
            if used and not inside and not m.within(*CLI_ENTRY):
                offences.append(f"{m.where(node)}: imports {name} of consumer {used}")
    _fail_with(offences, "consumers import tools' sessions, and nothing imports a consumer")


def _printing(module: Module):
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in PRINT_CALLS:
            yield node, f"calls {_dotted(node.func)}()"
        elif isinstance(node, ast.Attribute) and node.attr in STD_STREAMS and _dotted(node.value) == "sys":
            yield node, f"uses sys.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and not node.level:
            for alias in node.names:
                if alias.name in STD_STREAMS:
                    yield node, f"imports sys.{alias.name}"


def test_only_the_output_layer_prints():
    offences = [f"{m.where(node)}: {what}"
                for m in MODULES if not m.within("ebpfkit.output", *CLI_ENTRY)
                for node, what in _printing(m)]
    _fail_with(offences, "print through ebpfkit.output (Output, its logger, forward_output)")


def _format_reads(module: Module):
    """``x.format`` compared with something, and ``.format`` of an Output or its settings."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr == "format":
                    yield side
        elif isinstance(node, ast.Attribute) and node.attr == "format":
            owner = _dotted(node.value).rpartition(".")[2]
            if owner in ("out", "output", "settings") or owner.endswith("_settings"):
                yield node


def test_only_the_output_layer_reads_the_format():
    offences = [f"{m.where(node)}: reads {_dotted(node) or '.format'}"
                for m in MODULES if not m.within("ebpfkit.output")
                for node in _format_reads(m)]
    _fail_with(offences, "hand results to ebpfkit.output; it decides how they look")


# --- tests ---

TESTS = ROOT / "tests"
# areas of the project outside the Python package, each a top-level directory tested under
# tests/<kind>/<its name>/: deploy/ holds the Kubernetes manifests and the Containerfile (whose
# steps are scripts/image.sh's), examples/ the notebooks
PROJECT_AREAS = {"deploy", "examples", "scripts"}


def test_tests_mirror_the_packages():
    """tests/unit/<area>/ and tests/integration/<area>/ name a part of ebpfkit (engine/,
    tools/xdp/, ...) or one of the project's areas outside the package (deploy/, examples/), so
    a test is found where its code is; only whole-package tests (the CLI, this file, the README)
    sit at the top."""
    top = {"test_architecture.py", "test_cli.py", "test_readme.py"}
    offences = []
    for kind in ("unit", "integration"):
        for test in sorted((TESTS / kind).rglob("test_*.py")):
            area = test.parent.relative_to(TESTS / kind)
            if area == Path("."):
                if test.name not in top:
                    offences.append(f"{test.relative_to(ROOT)}: at the top; move it under its area")
            elif area.parts[0] in PROJECT_AREAS:
                if not (ROOT / area).is_dir():
                    offences.append(f"{test.relative_to(ROOT)}: {area}/ does not exist")
            elif not (PACKAGE / area / "__init__.py").exists() and not (PACKAGE / f"{area}.py").exists():
                offences.append(f"{test.relative_to(ROOT)}: ebpfkit/{area} does not exist")
    _fail_with_paths(offences, "tests live under the area of ebpfkit they test")


def _fail_with_paths(offences: list[str], rule: str) -> None:
    if offences:
        pytest.fail(f"{rule}:\n  " + "\n  ".join(offences), pytrace=False)


def test_a_tools_command_loads_no_engine_until_it_runs():
    """`ebpfkit <tool> --help` (and shell completion) builds the tool's click command: that
    must load nothing of the engine beyond what `ebpfkit.cli` itself needs (the --btf check),
    so a package's public names are imported lazily and sessions import the engine inside."""
    import subprocess
    import sys

    code = ("import importlib, sys\n"
            "import ebpfkit.cli\n"
            "before = set(sys.modules)\n"
            "from ebpfkit.tools import TOOLS\n"
            "for tool in TOOLS.values():\n"
            "    new = set(sys.modules)\n"
            "    importlib.import_module(tool.module)\n"
            "    for m in sorted(set(sys.modules) - new - before):\n"
            "        if m.startswith('ebpfkit.engine'):\n"
            "            print(tool.name, m)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "", "engine modules a tool's CLI module imports (tool, module):\n" + out.stdout
