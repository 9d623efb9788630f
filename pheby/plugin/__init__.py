"""The companion Hermes plugin's server side: the extras it can provide (`extras`, declared once), the
link to it (`link`), what it pushes (`pushes`), per-conversation model/effort/YOLO (`conversation_settings`)
and `pheby hermes install-plugin` (`install`).

`extras` imports nothing of the server, so `pheby.settings`, `pheby.hermes` and `pheby.runs` may read
it. The other modules sit above the run engine and may import any other package of `pheby`.
"""
