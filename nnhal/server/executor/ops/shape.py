"""shape operations (to be implemented)."""
