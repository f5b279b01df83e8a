"""comparisons operations (to be implemented)."""
