"""The Pheby WebSocket: `endpoint.py` holds the connection loop, `handshake.py` the first-frame hello,
`frames.py` the decoding of frames, `registry.py` maps each message type to its handler module (one
module per client message type)."""
