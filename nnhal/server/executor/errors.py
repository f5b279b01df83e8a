"""The executor's one vocabulary for failure: ``fail(message)`` and ``require(condition, message)``.

Both raise a :class:`~nnhal.core.errors.HalError`; which status it carries is
the one the HAL prescribes for the stage that finds the problem:

- validation and prepare (a model that breaks an operation's rules):
  ``INVALID_ARGUMENT``, the default here and the only status
  ``ValidationContext.fail`` / ``require`` raise;
- execution: ``ExecutionContext.fail`` / ``require`` raise the status the
  operation's family declared at registration (``execution_failure``):
  ``GENERAL_FAILURE`` for kernels that cannot compute with the values they
  were given (the reference CpuExecutor's ``ANEURALNETWORKS_OP_FAILED``), or
  ``INVALID_ARGUMENT`` for the families whose runtime operands (shapes,
  indexes, recurrent weights) the request itself got wrong. A call may name
  another status where one check differs from its family.

Operations reach this module through their context, which prefixes the
operation's name; shared helpers without a context call it directly.
"""

from __future__ import annotations

from typing import NoReturn

from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument

#: The status of a model (or request value) that breaks an operation's rules.
INVALID: type[HalError] = InvalidArgument
#: The status of a kernel that cannot compute with the values it was given.
OP_FAILED: type[HalError] = GeneralFailure


def fail(message: str, status: type[HalError] = INVALID) -> NoReturn:
    """Raise ``status`` (INVALID_ARGUMENT unless named) with ``message``."""
    raise status(message)


def require(condition: object, message: str, status: type[HalError] = INVALID) -> None:
    """Raise ``status`` (INVALID_ARGUMENT unless named) with ``message`` unless ``condition`` holds."""
    if not condition:
        raise status(message)
