"""quantize operations (to be implemented)."""
