"""The canonical enums (``nnhal.core.enums``): extension types as pseudo-members, feature
levels ordered and labelled, and the level that introduced each operation and operand type
(as the NNAPI types.hal sections and AIDL OperationType.aidl give them)."""

from __future__ import annotations

import pytest

from nnhal.core.enums import (
    OPERAND_TYPE_INTRODUCED,
    OPERATION_INTRODUCED,
    HalVersion,
    OperandType,
    OperationType,
    extension_prefix,
    extension_type,
    is_extension_type,
)

V = HalVersion


@pytest.mark.parametrize("cls", [OperandType, OperationType])
def test_an_extension_type_is_a_pseudo_member_equal_to_its_number(cls: type[OperandType | OperationType]) -> None:
    value = extension_type(3, 7)
    assert value == 3 << 16 | 7 and is_extension_type(value) and extension_prefix(value) == 3
    member = cls(value)
    assert member == value and hash(member) == hash(value) and member.name == "EXTENSION_3_7"
    assert cls(value) == member and isinstance(member, cls)
    assert member not in list(cls)  # iterating the enum lists the HAL's own types only
    assert not is_extension_type(int(next(iter(cls))))
    assert cls(extension_type(0xFFFF, 0xFFFF)).name == "EXTENSION_65535_65535"


@pytest.mark.parametrize("value", [999, 1 << 32, -1, 1 << 16 | 999 << 32])
def test_a_number_that_is_neither_a_type_nor_an_extensions_is_refused(value: int) -> None:
    with pytest.raises(ValueError):
        OperandType(value)
    with pytest.raises(ValueError):
        OperationType(value)


def test_feature_levels_are_ordered_and_labelled() -> None:
    assert sorted(HalVersion) == list(HalVersion)
    assert [v.is_aidl for v in HalVersion] == [False] * 4 + [True] * 4
    assert V.V1_2.label == "1.2"
    assert V.AIDL_V1.label == "AIDL V1 (feature level 5)" and V.AIDL_V4.label == "AIDL V4 (feature level 8)"


@pytest.mark.parametrize(
    "op, level",
    [
        (OperationType.ADD, V.V1_0),
        (OperationType.TANH, V.V1_0),
        (OperationType.OEM_OPERATION, V.V1_0),
        (OperationType.BATCH_TO_SPACE_ND, V.V1_1),
        (OperationType.TRANSPOSE, V.V1_1),
        (OperationType.ABS, V.V1_2),
        (OperationType.RESIZE_NEAREST_NEIGHBOR, V.V1_2),
        (OperationType.QUANTIZED_LSTM, V.V1_3),
        (OperationType.RANK, V.V1_3),
        (OperationType.BATCH_MATMUL, V.AIDL_V2),
        (OperationType.PACK, V.AIDL_V2),
        (OperationType.MIRROR_PAD, V.AIDL_V3),
        (OperationType.REVERSE, V.AIDL_V3),
    ],
)
def test_the_level_that_introduced_an_operation(op: OperationType, level: HalVersion) -> None:
    assert OPERATION_INTRODUCED[op] == level


def test_every_operation_and_operand_type_has_a_level_and_no_aidl_level_added_an_operand_type() -> None:
    assert set(OPERATION_INTRODUCED) == set(OperationType)
    assert V.AIDL_V1 not in OPERATION_INTRODUCED.values() and V.AIDL_V4 not in OPERATION_INTRODUCED.values()
    assert set(OPERAND_TYPE_INTRODUCED) == set(OperandType)
    assert OPERAND_TYPE_INTRODUCED[OperandType.TENSOR_QUANT8_ASYMM] == V.V1_0
    assert OPERAND_TYPE_INTRODUCED[OperandType.TENSOR_OEM_BYTE] == V.V1_0
    assert OPERAND_TYPE_INTRODUCED[OperandType.FLOAT16] == V.V1_2
    assert OPERAND_TYPE_INTRODUCED[OperandType.TENSOR_QUANT8_SYMM] == V.V1_2
    assert OPERAND_TYPE_INTRODUCED[OperandType.TENSOR_QUANT8_ASYMM_SIGNED] == V.V1_3
    assert OPERAND_TYPE_INTRODUCED[OperandType.SUBGRAPH] == V.V1_3
    assert not any(v.is_aidl for v in OPERAND_TYPE_INTRODUCED.values())
