"""Model importers: real ``.tflite`` files -> canonical NNAPI models (DESIGN §1, ``importers/``).

``import_tflite(path)`` (``tflite_model``) reads the flatbuffer with the ``tflite`` package
(``reader``, sparse constants densified by ``densify``), maps each builtin operator as the TFLite
NNAPI delegate does (``mapping`` and the ``ops_*`` families, on ``converter``), and returns an
``ImportedModel``: the ``Model`` with its inputs' and outputs' names and shapes. ``saved`` keeps
one in a versioned ``.nnhal`` file; ``litert`` runs the same file in LiteRT (the optional
``ai-edge-litert`` package) for comparisons. This layer builds models with the client's
``ModelBuilder`` and never talks to a server.
"""
