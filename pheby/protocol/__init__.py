"""The Pheby wire: server → client frames (`frames`), the hub of authenticated sockets (`hub`) and its
coalescing of a run's cumulative deltas (`coalesce`), the uvicorn WebSocket protocol with its pre-hello
ceilings (`ws_protocol`) and its permessage-deflate (`ws_compression`), and untrusted JSON (`json_input`).

May import: the basics (`pheby.settings`, `pheby.errors`, `pheby.db`, `pheby.redact`) and its own
modules only: everything else in the server builds on the wire, never the other way round.
"""
