"""Benchmarks: our path (the public client API, numpy in to numpy out) against an anchor
that shares none of our overhead, measured in the same run (DESIGN §11)."""
