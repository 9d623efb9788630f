"""Renders Pheby Web's PNG icons from web/icon.svg with Debian's Chromium (Playwright drives it).

The PNGs are committed; run this again after changing the SVG:

    .venv/bin/python scripts/render_icons.py

The web app manifest names them: 192 and 512 px with transparent corners, and a 512 px maskable
one, the same mark on a square of the accent colour with no corners, which a launcher may crop to
any shape (the mark lies well inside the central circle that every crop keeps).
"""

import base64
from pathlib import Path

from playwright.sync_api import sync_playwright

WEB = Path(__file__).resolve().parent.parent / "web"
CHROMIUM = "/usr/bin/chromium"
ACCENT = "#5b5bd6"  # the SVG's own fill, --accent in web/app.css
ICONS = [("icon-192.png", 192, False), ("icon-512.png", 512, False), ("icon-maskable-512.png", 512, True)]


def page_for(svg: bytes, size: int, maskable: bool) -> str:
    source = "data:image/svg+xml;base64," + base64.b64encode(svg).decode()
    background = ACCENT if maskable else "transparent"
    return (
        f"<!doctype html><body style='margin:0;background:{background}'>"
        f"<img src='{source}' width='{size}' height='{size}' style='display:block'></body>"
    )


def main() -> None:
    svg = (WEB / "icon.svg").read_bytes()
    (WEB / "icons").mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        for name, size, maskable in ICONS:
            page = browser.new_page(viewport={"width": size, "height": size}, device_scale_factor=1)
            page.set_content(page_for(svg, size, maskable))
            page.locator("img").evaluate("img => img.decode()")
            page.screenshot(path=str(WEB / "icons" / name), omit_background=not maskable)
            page.close()
        browser.close()


if __name__ == "__main__":
    main()
