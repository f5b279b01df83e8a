"""conv operations (to be implemented)."""
