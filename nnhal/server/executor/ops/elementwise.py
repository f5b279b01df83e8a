"""elementwise operations (to be implemented)."""
