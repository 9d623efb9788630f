"""Pheby Web's files (the top-level `web/` folder): read once at start-up, served under a content hash.

Every asset lives at `/web/<version>/<path>`, where `version` is a hash of all the files, so a
browser may cache them forever; the HTML shell at `/` names the current version and is never
cached. Only files listed in the manifest resolve: a request path is a dictionary key, never a
filesystem path.
"""

import hashlib
from dataclasses import dataclass
from pathlib import Path

WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
INDEX_TEMPLATE = "index.html"
# The shell names its assets through this placeholder (the versioned prefix, without a trailing slash).
ASSET_BASE_PLACEHOLDER = "%ASSET_BASE%"
ASSET_PREFIX = "/web"

MEDIA_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

# No inline script or style and no eval; everything comes from this server. CSP Level 3 lets
# 'self' match ws:/wss: on the page's own host and port, so `connect-src 'self'` covers /ws.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
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
    """Read every servable file under `root` once; the shell gets the versioned asset prefix."""
    assets: dict[str, WebAsset] = {}
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        media_type = MEDIA_TYPES.get(file.suffix)
        if media_type is None:
            continue  # index.html is the template; licences and notes ship but aren't served
        relative = file.relative_to(root).as_posix()
        body = file.read_bytes()
        digest.update(relative.encode() + b"\0" + body + b"\0")
        assets[relative] = WebAsset(body, media_type)
    template = (root / INDEX_TEMPLATE).read_text(encoding="utf-8")
    digest.update(template.encode())
    version = digest.hexdigest()[:16]
    index_html = template.replace(ASSET_BASE_PLACEHOLDER, f"{ASSET_PREFIX}/{version}").encode()
    return WebBundle(version=version, index_html=index_html, assets=assets)


# Read at import, which is start-up: the routes only look things up.
BUNDLE = load_web_bundle()
