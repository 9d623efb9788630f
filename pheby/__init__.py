"""pheby: the server's domain, below `handlers` (which it never imports).

At the top: the basics every layer may import (`settings`, `errors`, `db`, `redact`), the
composition root (`services`), the cross-cutting services built from several packages (`auth`,
`readiness`, `revocation`, `web_client`) and the entry points (`cli`, `server`, `startup_checks`).
The subpackages, lowest first (each `__init__` states what it may import; `tests/test_layers.py`
holds them to it):

- `protocol/`: the Pheby wire (frames, the hub of live sockets, the WebSocket protocol, JSON input);
- `files/`: what a file is, text extraction, `MEDIA:` tags and files;
- `store/`: the SQL stores (accounts, conversations, artifacts, attachments, the change feed, ...);
- `hermes/`: the server's use of Hermes (client pool, features, history, memory, tasks, model choice);
- `runs/`: the run engine;
- `plugin/`: the companion Hermes plugin's server side (extras, link, pushes, overrides, installer);
- `push/`: Web Push (VAPID, subscriptions, when to push, answer tokens, delivery).
"""
