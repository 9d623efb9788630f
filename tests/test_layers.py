"""Imports go one way: every module's imports (read with `ast`, function-level and type-only ones
included) are checked against the layers the README and each package's `__init__` docstring state.

`handlers` (routes) → `pheby` (the domain) → `storage`, `hermes_client`; `demo_hermes` and the
companion plugin stand apart from the server. Inside `pheby`, each subpackage may import only the
layers its `__init__` names.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVER = ("pheby", "handlers", "storage", "scheduler", "hermes_client")
FIRST_PARTY = (*SERVER, "demo_hermes", "hermes_plugin", "pheby_main")

# The basics at pheby's top that every package may import; the rest of the top (the composition root,
# the cross-cutting services and the entry points) only the top itself and handlers may.
BASICS = (
    "pheby.settings",
    "pheby.errors",
    "pheby.db",
    "pheby.redact",
    "pheby.metrics",
    "pheby.cancelling",
    "pheby.process_lease",
)
PLUGIN_EXTRAS = "pheby.plugin.extras"
HERMES = ("pheby.hermes", "hermes_client")

# (modules under this prefix, may import only these first-party prefixes). The first matching
# prefix applies, so more specific ones come first. Third-party and standard-library imports are free.
ALLOWED: list[tuple[str, tuple[str, ...]]] = [
    (PLUGIN_EXTRAS, ()),
    (
        "pheby.settings",
        (PLUGIN_EXTRAS, "pheby.db"),
    ),  # the extras' settings derive from their declaration; the database it names
    ("pheby.errors", ()),
    ("pheby.db", ("pheby.errors", "pheby.db")),
    ("pheby.redact", ()),
    ("pheby.metrics", ()),
    ("pheby.cancelling", ()),
    ("pheby.process_lease", ("pheby.db", "pheby.errors")),
    (
        "pheby.events",
        ("pheby.db", "pheby.errors", "pheby.settings", "pheby.metrics", "pheby.cancelling", "pheby.events"),
    ),
    ("pheby.cluster", (*BASICS, "pheby.protocol", "pheby.events", "pheby.cluster")),
    ("pheby.protocol", (*BASICS, "pheby.protocol")),
    ("pheby.files", ("pheby.errors", "pheby.files", "storage")),
    ("pheby.store", (*BASICS, "pheby.files", "pheby.protocol.frames", "pheby.store", "storage")),
    ("pheby.hermes", (*BASICS, "pheby.files", "pheby.protocol.frames", "pheby.store", PLUGIN_EXTRAS, *HERMES)),
    ("pheby.runs", (*BASICS, "pheby.protocol", "pheby.files", "pheby.store", *HERMES, PLUGIN_EXTRAS, "pheby.runs")),
    ("pheby.plugin", (*BASICS, "pheby.protocol", "pheby.files", "pheby.store", *HERMES, "pheby.runs", "pheby.plugin")),
    ("pheby.push", (*BASICS, "pheby.protocol", "pheby.store", "pheby.runs", "pheby.push")),
    ("pheby.search", (*BASICS, "pheby.protocol.frames", "pheby.store", "pheby.search")),
    ("pheby", ("pheby", "storage", "hermes_client")),  # the top: everything of the domain
    ("storage", ("storage",)),
    ("hermes_client", ("hermes_client",)),
    ("scheduler", ("scheduler", "pheby", "storage", "hermes_client")),
    ("demo_hermes", ("demo_hermes",)),  # the Hermes double knows nothing of the server
    ("hermes_plugin", ("hermes_plugin",)),  # runs inside Hermes, where the server is not installed
    ("handlers", ("handlers", "pheby", "storage", "scheduler", "hermes_client")),
    ("pheby_main", ("pheby", "handlers")),  # the entry point, above both
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> set[tuple[int, str]]:
    return set(_imports_of(path))


def _imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """Every first-party module `path` imports, with its line; `from a import b` names `a.b` if it is a module."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                dotted = f"{base}.{alias.name}"
                yield node.lineno, dotted if is_module(dotted) else base


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_for(module: str) -> tuple[str, tuple[str, ...]] | None:
    return next(((prefix, allowed) for prefix, allowed in ALLOWED if within(module, prefix)), None)


def violations() -> list[str]:
    found = []
    for top in FIRST_PARTY:
        paths = [ROOT / f"{top}.py"] if (ROOT / f"{top}.py").is_file() else sorted((ROOT / top).rglob("*.py"))
        for path in paths:
            module = module_name(path)
            rule = rule_for(module)
            for line, imported in sorted(imports_of(path)):
                if imported.split(".")[0] not in FIRST_PARTY:
                    continue  # the standard library and third-party packages are free
                if rule is None or not any(within(imported, allowed) for allowed in rule[1]):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {module} imports {imported}")
    return found


def test_no_import_goes_against_the_layers() -> None:
    assert violations() == []


@pytest.mark.parametrize(
    ("module", "imported", "allowed"),
    [
        ("pheby.server", "handlers.support.app", False),  # the domain never imports the routes
        ("pheby.protocol.ws_protocol", "handlers.ws.support.frames", False),
        ("storage.s3", "pheby.settings", False),
        ("hermes_client.client", "pheby.errors", False),
        ("demo_hermes.server", "hermes_client", False),
        ("pheby.store.attachments", "pheby.runs", False),
        ("pheby.store.attachments", "pheby.plugin.link", False),
        ("pheby.store.attachments", "pheby.protocol.hub", False),
        ("pheby.files.media_files", "pheby.store.accounts", False),
        ("pheby.hermes.features", "pheby.plugin.link", False),
        ("pheby.runs.engine", "pheby.plugin.link", False),
        ("pheby.runs.engine", PLUGIN_EXTRAS, True),
        ("pheby.plugin.pushes", "pheby.runs", True),
        ("handlers.support.app", "pheby.services", True),
    ],
)
def test_the_rules_say_what_the_docstrings_say(module: str, imported: str, allowed: bool) -> None:
    rule = rule_for(module)
    assert rule is not None
    assert any(within(imported, prefix) for prefix in rule[1]) is allowed


def test_every_package_states_its_rule() -> None:
    """Every subpackage of pheby says in its `__init__` docstring what it may import."""
    for init in sorted((ROOT / "pheby").glob("*/__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "May import" in docstring or "may import" in docstring, init.parent.name
