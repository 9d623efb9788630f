"""The `pheby` command's entry point, the one module above both `handlers` and `pheby`.

`pheby` (the domain) never imports `handlers` (the routes); the app factory that joins them,
`handlers.support.app.create_app`, is handed to `pheby.cli` from here. `python -m pheby_main ...`
is the same as the installed `pheby` command.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pheby import cli
from pheby.settings import Settings

if TYPE_CHECKING:
    from litestar import Litestar


def create_app(settings: Settings) -> "Litestar":
    """The app, imported only for `serve`, so the account commands stay light."""
    from handlers.support.app import create_app

    return create_app(settings)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, app_factory=create_app)


if __name__ == "__main__":
    raise SystemExit(main())
