"""lookup operations (to be implemented)."""
