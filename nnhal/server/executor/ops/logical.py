"""logical operations (to be implemented)."""
