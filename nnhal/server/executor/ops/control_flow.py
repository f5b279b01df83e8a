"""control_flow operations (to be implemented)."""
