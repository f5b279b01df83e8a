"""Generated protobuf and gRPC code (``make proto``; never edited). Only nnhal.core.wire, nnhal.server.rpc
and nnhal.client.remote import it (an import-linter contract)."""
