"""The Pheby WebSocket: `endpoint.py` is the `/ws` route (the connection loop), and every other module
here is one client message type. `support/` holds the rest: `handshake.py` the first-frame hello,
`frames.py` the decoding of frames, `registry.py` maps each message type to its handler module,
`context.py` what a handler gets, `messages.py` the base of client messages."""
