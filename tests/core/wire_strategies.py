"""Hypothesis strategies for canonical values that the wire can carry.

Each strategy draws values inside the ranges of the protobuf fields they travel in
(uint32 / uint64 / int32 integers, float32-exact floats, valid Unicode strings), so a
round trip through nnhal.core.wire must give back an equal value. Values a wire field
cannot hold, or that the wire normalises on purpose, are tested separately in
test_wire.py.
"""

from __future__ import annotations

from hypothesis import strategies as st

from nnhal.core.enums import ErrorStatus, OperandLifeTime, OperandType, OperationType
from nnhal.core.types import (
    BufferRole,
    BufferTokenPool,
    Capabilities,
    DataLocation,
    ExecutionResult,
    Extension,
    ExtensionNameAndPrefix,
    ExtensionOperandTypeInformation,
    FencedExecutionInfo,
    InlinePool,
    MemoryPool,
    Model,
    Operand,
    OperandPerformance,
    Operation,
    OperationProfile,
    OutputShape,
    PerformanceInfo,
    Request,
    RequestArgument,
    SharedMemoryPool,
    Subgraph,
    SymmPerChannelQuantParams,
    Timing,
)

U32 = st.integers(0, 2**32 - 1)
U64 = st.integers(0, 2**64 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
#: float32 fields: every float32 value but NaN (NaN never equals itself).
F32 = st.floats(width=32, allow_nan=False)
TEXT = st.text(max_size=12)
BLOB = st.binary(max_size=24)
DIMS = st.lists(U32, max_size=4).map(tuple)
SMALL = 3

#: Every status a peer sends; DEAD_OBJECT is the client's own verdict, never sent.
SENT_STATUSES = [s for s in ErrorStatus if s != ErrorStatus.DEAD_OBJECT]

locations = st.builds(DataLocation, U32, U32, U32)

channel_quants = st.builds(SymmPerChannelQuantParams, st.lists(F32, max_size=4).map(tuple), U32)


@st.composite
def operands(draw: st.DrawFn) -> Operand:
    # ExtraParams is a oneof: an operand carries per-channel parameters or extension
    # bytes, never both.
    extra = draw(st.sampled_from(["none", "channel_quant", "extension"]))
    return Operand(
        type=draw(st.sampled_from(OperandType)),
        dimensions=draw(DIMS),
        number_of_consumers=draw(U32),
        scale=draw(F32),
        zero_point=draw(I32),
        lifetime=draw(st.sampled_from(OperandLifeTime)),
        location=draw(locations),
        channel_quant=draw(channel_quants) if extra == "channel_quant" else None,
        extension_params=draw(BLOB) if extra == "extension" else None,
    )


operations = st.builds(
    Operation,
    st.sampled_from(OperationType),
    st.lists(U32, max_size=4).map(tuple),
    st.lists(U32, max_size=4).map(tuple),
)

subgraphs = st.builds(
    Subgraph,
    st.lists(operands(), max_size=SMALL).map(tuple),
    st.lists(operations, max_size=SMALL).map(tuple),
    st.lists(U32, max_size=SMALL).map(tuple),
    st.lists(U32, max_size=SMALL).map(tuple),
)


@st.composite
def inline_pools(draw: st.DrawFn) -> InlinePool:
    # An output-only pool declares more bytes than it carries; never fewer.
    data = draw(BLOB)
    return InlinePool(data, len(data) + draw(st.integers(0, 2**64 - 1 - len(data))))


shared_pools = st.builds(SharedMemoryPool, TEXT, TEXT, U64, U64)
token_pools = st.builds(BufferTokenPool, st.integers(1, 2**32 - 1))
pools: st.SearchStrategy[MemoryPool] = st.one_of(inline_pools(), shared_pools, token_pools)

models = st.builds(
    Model,
    main=subgraphs,
    referenced=st.lists(subgraphs, max_size=2).map(tuple),
    operand_values=BLOB,
    pools=st.lists(pools, max_size=SMALL).map(tuple),
    relax_computation_float32_to_float16=st.booleans(),
    extension_name_to_prefix=st.lists(st.builds(ExtensionNameAndPrefix, TEXT, U32), max_size=2).map(tuple),
)

request_arguments = st.builds(RequestArgument, st.booleans(), locations, DIMS)
requests = st.builds(
    Request,
    st.lists(request_arguments, max_size=SMALL).map(tuple),
    st.lists(request_arguments, max_size=SMALL).map(tuple),
    st.lists(pools, max_size=SMALL).map(tuple),
)

output_shapes = st.builds(OutputShape, DIMS, st.booleans())
timings = st.builds(Timing, U64, U64)
output_pool_contents = st.dictionaries(U32, BLOB, max_size=SMALL)
profiles = st.lists(st.builds(OperationProfile, TEXT, U32, U64), max_size=SMALL).map(tuple)

execution_results = st.builds(
    ExecutionResult,
    status=st.sampled_from(SENT_STATUSES),
    message=TEXT,
    output_shapes=st.lists(output_shapes, max_size=SMALL).map(tuple),
    timing=timings,
    output_pools=output_pool_contents,
    profile=profiles,
)

fenced_infos = st.builds(
    FencedExecutionInfo,
    signalled=st.booleans(),
    status=st.sampled_from(SENT_STATUSES),
    message=TEXT,
    timing_launched=timings,
    timing_fenced=timings,
    output_pools=output_pool_contents,
)

performance = st.builds(PerformanceInfo, F32, F32)
capabilities = st.builds(
    Capabilities,
    performance,
    performance,
    st.lists(st.builds(OperandPerformance, st.sampled_from(OperandType), performance), max_size=SMALL).map(tuple),
    performance,
    performance,
)

extensions = st.builds(
    Extension,
    TEXT,
    st.lists(st.builds(ExtensionOperandTypeInformation, U32, st.booleans(), U32), max_size=SMALL).map(tuple),
)

buffer_roles = st.builds(BufferRole, U32, U32, F32)
