"""The table from TFLite builtin operator to its mapper, and the reasons for what is not mapped.

``MAPPERS`` merges the families (conv, element-wise, shape, misc). ``NOT_MAPPED`` names the
builtins the TFLite NNAPI delegate maps but this importer does not, and why; every other
builtin gets ``reason_for`` 's generic answer (the delegate has no mapping for it either, so it
would stay on TFLite's CPU kernels). The README's table is written from these two.
"""

from __future__ import annotations

from nnhal.importers import ops_conv, ops_elementwise, ops_misc, ops_shape
from nnhal.importers.ops_conv import Mapper

MAPPERS: dict[str, Mapper] = {
    **ops_conv.MAPPERS,
    **ops_elementwise.MAPPERS,
    **ops_shape.MAPPERS,
    **ops_misc.MAPPERS,
}

_STATEFUL = (
    "stateful: TFLite keeps its state in variable tensors across invocations, which the delegate feeds "
    "back as extra NNAPI inputs and outputs; a one-shot imported model has nowhere to keep it"
)

NOT_MAPPED: dict[str, str] = {
    "LSTM": _STATEFUL,
    "UNIDIRECTIONAL_SEQUENCE_LSTM": _STATEFUL,
    "BIDIRECTIONAL_SEQUENCE_LSTM": _STATEFUL,
    "RNN": _STATEFUL,
    "UNIDIRECTIONAL_SEQUENCE_RNN": _STATEFUL,
    "SVDF": _STATEFUL,
    "LSH_PROJECTION": "not implemented here (hash-based projection; rare outside 2018 on-device text models)",
}


def reason_for(name: str) -> str:
    """Why operator ``name`` has no mapper."""
    if name in NOT_MAPPED:
        return NOT_MAPPED[name]
    if name.startswith("CUSTOM:"):
        return "a custom operator: NNAPI has no equivalent (the delegate leaves it on TFLite's CPU kernels)"
    return "the TFLite NNAPI delegate has no NNAPI mapping for it (it stays on TFLite's CPU kernels)"
