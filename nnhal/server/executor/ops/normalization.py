"""normalization operations (to be implemented)."""
