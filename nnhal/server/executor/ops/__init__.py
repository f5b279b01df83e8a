"""Operation families. Importing this package registers every operation.

Each family module registers its operations at import; the list is explicit
(no scanning of globals) so that a missing family is an import error. Modules
whose names start with an underscore (and ``common``) are shared helpers, not
families: families import them, never each other.
"""

from nnhal.server.executor.ops import (  # noqa: F401
    activations,
    box_transform,
    comparisons,
    control_flow,
    conv,
    detection_postprocessing,
    elementwise,
    fully_connected,
    generate_proposals,
    heatmap,
    logical,
    lookup,
    lstm,
    matmul,
    nms,
    normalization,
    pooling,
    quantize,
    quantized_16bit_lstm,
    quantized_lstm,
    reduce,
    resize,
    rnn,
    roi,
    shape,
    slicing,
    unary,
)
