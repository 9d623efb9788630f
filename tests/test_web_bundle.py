"""Pheby Web's bundle: files read once, addressed by a content hash, only manifest paths resolve."""

import posixpath
import re
from pathlib import Path

from pheby.web_client import WEB_ROOT, load_web_bundle


def make_web(root: Path) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "index.html").write_text('<script type="module" src="%ASSET_BASE%/app.js"></script>', encoding="utf-8")
    (root / "manifest.webmanifest").write_text('{"icons": [{"src": "%ASSET_BASE%/icon.png"}]}', encoding="utf-8")
    (root / "sw.js").write_text('const ICON = "%ASSET_BASE%/icon.png";', encoding="utf-8")
    (root / "app.js").write_text("import './lib/x.js';", encoding="utf-8")
    (root / "lib" / "x.js").write_text("export {};", encoding="utf-8")
    (root / "NOTES").write_text("not served", encoding="utf-8")
    return root


def test_the_shell_names_the_versioned_assets(tmp_path: Path) -> None:
    bundle = load_web_bundle(make_web(tmp_path / "web"))
    assert bundle.index_html.decode() == f'<script type="module" src="/web/{bundle.version}/app.js"></script>'
    assert set(bundle.assets) == {"app.js", "lib/x.js"}
    asset = bundle.asset(bundle.version, "/lib/x.js")
    assert asset is not None
    assert asset.body == b"export {};"
    assert asset.media_type == "text/javascript"


def test_the_manifest_and_the_worker_name_the_versioned_assets_and_are_no_assets(tmp_path: Path) -> None:
    bundle = load_web_bundle(make_web(tmp_path / "web"))
    assert bundle.manifest.decode() == f'{{"icons": [{{"src": "/web/{bundle.version}/icon.png"}}]}}'
    assert bundle.service_worker.decode() == f'const ICON = "/web/{bundle.version}/icon.png";'
    # Served at the root only: a worker's scope is its script's folder, so one under /web/ would cover nothing.
    assert bundle.asset(bundle.version, "sw.js") is None
    assert bundle.asset(bundle.version, "manifest.webmanifest") is None


def test_the_version_changes_with_the_worker(tmp_path: Path) -> None:
    root = make_web(tmp_path / "web")
    before = load_web_bundle(root).version
    (root / "sw.js").write_text("// a new worker", encoding="utf-8")
    assert load_web_bundle(root).version != before


def test_only_manifest_paths_of_this_version_resolve(tmp_path: Path) -> None:
    root = make_web(tmp_path / "web")
    (tmp_path / "secret.js").write_text("secret", encoding="utf-8")
    (root / "link.js").symlink_to(tmp_path / "secret.js")
    bundle = load_web_bundle(root)
    for path in ("../secret.js", "link.js", "NOTES", "index.html", "lib/../app.js", "lib"):
        assert bundle.asset(bundle.version, path) is None
    assert bundle.asset("0" * 16, "app.js") is None


def test_the_version_changes_with_any_file(tmp_path: Path) -> None:
    root = make_web(tmp_path / "web")
    before = load_web_bundle(root).version
    (root / "lib" / "x.js").write_text("export const changed = 1;", encoding="utf-8")
    assert load_web_bundle(root).version != before


def test_the_shipped_client_is_complete() -> None:
    bundle = load_web_bundle(WEB_ROOT)
    for path in (
        "app.js",
        "app.css",
        "vendor/preact.mjs",
        "vendor/hooks.mjs",
        "vendor/purify.mjs",
        "icons/icon-192.png",
    ):
        assert path in bundle.assets
    assert (WEB_ROOT / "vendor" / "licenses" / "dompurify-LICENSE").is_file()


def test_every_module_import_resolves_inside_the_bundle() -> None:
    """No bare specifiers (there is no import map: the CSP allows no inline script) and no misses."""
    bundle = load_web_bundle(WEB_ROOT)
    specifier = re.compile(r"""(?:\bfrom|\bimport)\s*["']([^"']+)["']""")
    for path, asset in bundle.assets.items():
        if not path.endswith((".js", ".mjs")):
            continue
        for target in specifier.findall(asset.body.decode()):
            assert target.startswith("."), (path, target)
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            assert resolved in bundle.assets, (path, target)
