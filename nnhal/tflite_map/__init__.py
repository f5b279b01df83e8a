"""NNAPI ↔ TFLite: the tables both directions share, and a flatbuffer writer.

The importers (``.tflite`` → NNAPI model) and the server's litert device (NNAPI model →
``.tflite``) read the same correspondences from ``tables``: fused activation ↔ FuseCode,
padding ↔ implicit padding code, tensor type ↔ operand type, and the builtin operators
whose NNAPI operation takes the same tensors in the same order. ``writer`` builds a TFLite
flatbuffer with the ``tflite`` schema package's generated builder functions. This layer
sees only the core: neither the importers nor the server depend on each other through it.
"""
