"""The gRPC face of the driver: servicers (thin adapters to canonical types) and server assembly."""
