"""Pheby Web's files (the top-level `web/` folder): read once at start-up, served under a content hash.

Every asset lives at `/web/<version>/<path>`, where `version` is a hash of all the files, so a
browser may cache them forever. Three files are served at fixed addresses instead, never cached,
each naming the current version: the HTML shell at `/`, the web app manifest at
`/manifest.webmanifest` and the service worker at `/sw.js` (a worker's scope is the folder of its
script, so it must be served from the root to cover the whole app). Only files listed in the bundle
resolve: a request path is a dictionary key, never a filesystem path.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
INDEX_TEMPLATE = "index.html"
MANIFEST_TEMPLATE = "manifest.webmanifest"
SERVICE_WORKER_TEMPLATE = "sw.js"
# Served at fixed addresses (each route names its own), not under the versioned prefix.
FIXED_ADDRESS_FILES = frozenset({INDEX_TEMPLATE, MANIFEST_TEMPLATE, SERVICE_WORKER_TEMPLATE})
# These files name the assets through this placeholder (the versioned prefix, without a trailing slash).
ASSET_BASE_PLACEHOLDER = "%ASSET_BASE%"
ASSET_PREFIX = "/web"

MEDIA_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

MANIFEST_MEDIA_TYPE = "application/manifest+json"

# No inline script or style and no eval; everything comes from this server. CSP Level 3 lets
# 'self' match ws:/wss: on the page's own host and port, so `connect-src 'self'` covers /ws.
# `default-src 'none'` would refuse the manifest and, for browsers without the script-src
# fallback, the service worker: each gets its own 'self'.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; manifest-src 'self'; worker-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# The shell, the manifest and the service worker: fixed addresses, so a browser must ask each time
# (a browser also looks for a new worker on its own, at most a day apart, whatever the headers say).
SHELL_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
ASSET_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "public, max-age=31536000, immutable",
}


@dataclass(frozen=True)
class WebAsset:
    body: bytes
    media_type: str


@dataclass(frozen=True)
class WebBundle:
    version: str  # a hash of every served file: it changes whenever one does
    index_html: bytes
    manifest: bytes  # the web app manifest, naming the versioned icons
    service_worker: bytes
    assets: dict[str, WebAsset]  # by path relative to web/, e.g. "app.js", "vendor/preact.mjs"

    @property
    def asset_base(self) -> str:
        return f"{ASSET_PREFIX}/{self.version}"

    def asset(self, version: str, path: str) -> WebAsset | None:
        """The asset at `path` of this version, or None (another version, or not in the manifest)."""
        if version != self.version:
            return None
        return self.assets.get(path.lstrip("/"))


def load_web_bundle(root: Path = WEB_ROOT) -> WebBundle:
    """Read every servable file under `root` once; the files at fixed addresses get the versioned prefix."""
    assets: dict[str, WebAsset] = {}
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = file.relative_to(root).as_posix()
        media_type = MEDIA_TYPES.get(file.suffix)
        if media_type is None or relative in FIXED_ADDRESS_FILES:
            continue  # licences and notes ship but aren't served; the templates are read below
        body = file.read_bytes()
        digest.update(relative.encode() + b"\0" + body + b"\0")
        assets[relative] = WebAsset(body, media_type)
    templates = {name: (root / name).read_text(encoding="utf-8") for name in sorted(FIXED_ADDRESS_FILES)}
    for name, template in templates.items():
        digest.update(name.encode() + b"\0" + template.encode() + b"\0")
    version = digest.hexdigest()[:16]

    def filled(name: str) -> bytes:
        return templates[name].replace(ASSET_BASE_PLACEHOLDER, f"{ASSET_PREFIX}/{version}").encode()

    return WebBundle(
        version=version,
        index_html=filled(INDEX_TEMPLATE),
        manifest=filled(MANIFEST_TEMPLATE),
        service_worker=filled(SERVICE_WORKER_TEMPLATE),
        assets=assets,
    )


# Read at import, which is start-up: the routes only look things up.
BUNDLE = load_web_bundle()
