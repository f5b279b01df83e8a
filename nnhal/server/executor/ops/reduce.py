"""reduce operations (to be implemented)."""
