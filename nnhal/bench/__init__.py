"""Benchmarks: our path (the public client API, numpy in to numpy out) against an anchor
that shares none of our overhead, measured in the same run (DESIGN §11).

``registry`` lists them by name; ``common`` holds the result record and the
interleaved timing; ``ipc``, ``qos`` and ``execution`` are the benchmarks;
``echo_server`` (a bare gRPC server, run as its own process) and
``echo_anchor`` are the IPC anchor, ``onnx_anchor`` and ``zoo`` the MobileNet
one. This package imports nothing on import: ``python -m nnhal.bench.echo_server``
must load no nnhal code.
"""
