"""pheby."""
