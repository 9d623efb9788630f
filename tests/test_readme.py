"""The README's handler index names every route and message module, and docs/scaling.md only seams that
exist, so neither can drift unnoticed."""

import importlib
import re
from pathlib import Path

from handlers.support.app import ROUTES
from handlers.ws.support.registry import HANDLERS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_route_module_is_in_the_readme() -> None:
    modules = {handler.fn.__module__ for handler in ROUTES}  # type: ignore[union-attr]
    modules |= {handle.__module__ for handle in HANDLERS.values()}
    missing = sorted(m for m in modules if f"`{m.replace('.', '/')}.py`" not in README)
    assert missing == []


def test_the_two_commands_come_first() -> None:
    quick_start = README.split("## Quick start", 1)[1].split("##", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines() if line.startswith("make ")]
    assert commands == ["make run", "make test"]


def test_every_package_of_pheby_has_a_layout_row() -> None:
    layout = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip() for line in layout.splitlines() if line.startswith("| `")}
    root = Path(__file__).resolve().parent.parent
    packages = {f"`{init.parent.relative_to(root).as_posix()}/`" for init in (root / "pheby").rglob("__init__.py")}
    assert packages - rows == set()
    assert "the run engine" in layout


def test_every_seam_docs_scaling_names_is_in_the_code() -> None:
    """docs/scaling.md plans around named seams of the code: each `pheby.x.Y` it names must exist."""
    scaling = (Path(__file__).resolve().parent.parent / "docs" / "scaling.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:pheby|storage|scheduler)(?:\.\w+)+)", scaling))
    # The seams the plan changes: the database, fan-out, run ownership, the scheduler, revocation.
    seams = (
        "pheby.db.Database",
        "pheby.protocol.hub.Hub",
        "pheby.runs.engine.RunManager",
        "scheduler.running_scheduler",
        "pheby.revocation.Revocations",
    )
    for seam in seams:
        assert any(name == seam or name.startswith(seam + ".") for name in names), seam
    for name in sorted(names):
        parts = name.split(".")
        for split in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                found: object = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[split:]:
                found = getattr(found, attribute)
            break
        else:
            raise AssertionError(f"{name} is not in the code")
