"""fully_connected operations (to be implemented)."""
