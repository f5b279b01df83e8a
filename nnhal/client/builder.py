"""The model builder, where client code looks for it: :class:`~nnhal.core.builder.ModelBuilder`
lives in the core, so the importers build models without depending on the client."""

from __future__ import annotations

from nnhal.core.builder import ModelBuilder as ModelBuilder
