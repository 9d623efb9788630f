"""The numbered schema migrations in `pheby/migrations/`, one list for every engine.

`NNNN_name.sql` is the shared script. Where an engine needs other SQL (column types, SQLite's FTS5 and
triggers), `NNNN_name.postgresql.sql` beside it replaces it on PostgreSQL, so every engine records the
same version numbers and a database moves between engines at a known version.
"""

import functools
from importlib import resources

ENGINES = ("sqlite", "postgresql")


@functools.cache
def migration_scripts(engine: str = "sqlite") -> tuple[tuple[int, str], ...]:
    """This code's migrations for `engine`, (version, SQL) in order (read once: they ship with the code)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown database engine {engine!r}")
    folder = resources.files("pheby") / "migrations"
    shared: dict[int, str] = {}
    variants: dict[int, str] = {}
    for entry in folder.iterdir():
        name = entry.name
        if not (name.endswith(".sql") and name[:4].isdigit()):
            continue
        variant = name.removesuffix(".sql").rpartition(".")[2] if name.count(".") == 2 else None
        if variant is None:
            shared[int(name[:4])] = entry.read_text(encoding="utf-8")
        elif variant == engine:
            variants[int(name[:4])] = entry.read_text(encoding="utf-8")
    return tuple(sorted((shared | variants).items()))


def newest_version() -> int:
    """The newest migration this code has (every engine has the same numbers)."""
    return migration_scripts()[-1][0]
