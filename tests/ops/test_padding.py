"""The padding helpers: border-only fills equal np.pad, and strided views equal as_strided."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.server.executor.ops._padding import Padder, constant_pad, strided_view

PADS = [((0, 0), (1, 2), (3, 0), (0, 0)), ((0, 0), (0, 0), (0, 0), (0, 4)), ((1, 1), (0, 0), (2, 2), (1, 0))]


@pytest.mark.parametrize("pads", PADS)
def test_constant_pad_equals_numpy(pads: tuple[tuple[int, int], ...]) -> None:
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(constant_pad(x, pads, np.float32(-7)), np.pad(x, pads, constant_values=-7))


@pytest.mark.parametrize("spatial", [(0, 0, 0, 0), (1, 2, 0, 3), (2, 2, 2, 2)])
def test_padder_equals_numpy_and_passes_an_unpadded_input_through(spatial: tuple[int, int, int, int]) -> None:
    top, bottom, left, right = spatial
    x = np.random.default_rng(3).random((1, 5, 6, 3)).astype(np.float32)
    padder = Padder(x.shape, top, bottom, left, right, np.float32(-np.inf))
    expected = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    for _ in range(2):  # the same padder again: a fresh array each time
        np.testing.assert_array_equal(padder(x), expected)
    if not any(spatial):
        assert padder(x) is x


def test_strided_views_equal_as_strided_and_stay_inside_their_array() -> None:
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    s = x.strides
    view = strided_view(x, (2, 3, 5), (s[0], s[1], s[2]), s[1])
    np.testing.assert_array_equal(view, np.lib.stride_tricks.as_strided(x[:, 1:], (2, 3, 5), s))
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        strided_view(x, (3, 4, 6), s)  # one element past the end
    odd = x[:, :, ::2]  # not contiguous: as_strided's view
    np.testing.assert_array_equal(strided_view(odd, (3, 4, 3), odd.strides), odd)
