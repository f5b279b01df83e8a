"""lstm operations (to be implemented)."""
