"""pooling operations (to be implemented)."""
