"""What the WebSocket message modules share: the hello handshake, frame decoding and limits, the
registry of message types, the handler context and the `ClientMessage` base."""
