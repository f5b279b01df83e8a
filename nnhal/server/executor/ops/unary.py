"""unary operations (to be implemented)."""
