"""nnhal.core: what server and client share, with no transport in it.

- ``enums`` / ``types``: canonical NN HAL values (IntEnums numbered as in types.hal,
  frozen dataclasses); every other layer speaks these.
- ``operand_types``: per-OperandType tables (dtype, size, tensor or scalar).
- ``validation``: model and request validation (InvalidArgument naming the field).
- ``errors``: one HalError hierarchy, a class per ErrorStatus.
- ``wire``: canonical <-> protobuf for every message; the only core module that
  imports generated code.
- ``versions``: canonical <-> V1_0..V1_3 (the seed's convert / to_canonical rules).
- ``builder``: the NDK-style model builder (clients, importers and tests build models with it).
- ``protocol``: the call metadata keys client and server agree on; ``faults``: the
  description of an injected fault, which the client sends and the server applies.

Contract (enforced by import-linter): nothing here imports grpc, the server, the
client or anything above them.
"""
