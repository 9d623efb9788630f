"""handlers: one module per HTTP route (`ls handlers/` lists them), and under `ws/` one per WebSocket
message type. `support/` holds what is not a route: the app factory and route table (`support/app.py`),
dependencies, the error mapping, request bodies and uploads, downloads and the OpenAPI helpers."""
