"""nnhal: the Android Neural Networks HAL as a gRPC service."""

__version__ = "0.1.0"
