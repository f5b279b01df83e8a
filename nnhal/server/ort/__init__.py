"""The ``ort`` device: NNAPI models compiled to ONNX and run by ONNX Runtime (CPU EP).

``compiler`` converts a model with NNAPI's semantics (layouts, padding, fused
activations, quantization including per-channel filters) and says per operation
why it cannot; ``runtime.OrtBackend`` is the driver backend (sessions, the cached
optimized model); ``nnhal.server.capabilities`` measures it against the reference device.
Needs the ``ort`` extra (onnx, onnxruntime); nothing here imports gRPC or protobuf.
"""
