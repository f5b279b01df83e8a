"""detection operations (to be implemented)."""
