"""slicing operations (to be implemented)."""
