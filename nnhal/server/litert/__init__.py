"""The ``litert`` device: NNAPI models compiled to TFLite flatbuffers and run by LiteRT's
interpreter with XNNPACK (what AOSP's NNAPI support-library shim does with TFLite, here behind
the HAL boundary).

``compiler`` writes the flatbuffer (the importer's mapping run backwards, through
``nnhal.tflite_map``) and says per operation why it cannot; ``runtime.LiteRtBackend`` is the
driver backend, whose compiled flatbuffer is the compilation-cache artifact. Needs the
``tflite`` extra (ai-edge-litert); nothing here imports gRPC or protobuf.
"""
