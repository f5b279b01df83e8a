"""Operation families. Importing this package registers every operation.

Each family module registers its operations at import; the list is explicit
(no scanning of globals) so that a missing family is an import error.
"""

from nnhal.server.executor.ops import (  # noqa: F401
    activations,
    comparisons,
    control_flow,
    conv,
    detection,
    elementwise,
    fully_connected,
    logical,
    lookup,
    lstm,
    normalization,
    pooling,
    quantize,
    reduce,
    resize,
    rnn,
    shape,
    slicing,
    unary,
)
