"""The Pheby WebSocket: `endpoint.py` holds the connection loop, `registry.py` maps each message
type to its handler module (one module per client message type)."""
