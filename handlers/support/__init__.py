"""What the route modules share, none of it a route: the app factory and route table (`app`), request
bodies (`bodies`, `body_timeout`, `uploads`), `downloads`, `dependencies`, the error mapping (`errors`)
and the OpenAPI helpers (`openapi`)."""
