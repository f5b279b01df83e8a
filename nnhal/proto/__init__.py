"""Generated protobuf and gRPC code (``make proto``; never edited). Only the nnhal.core.wire* modules, nnhal.server.rpc
and nnhal.client.remote import it (an import-linter contract)."""
