"""resize operations (to be implemented)."""
