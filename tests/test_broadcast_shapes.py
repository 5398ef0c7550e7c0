"""symgrad.op_base.broadcast_shapes answers operands of one shape (and scalars) itself: the
same shapes, and the same ValueError, as NumPy's broadcast_shapes for every combination."""
import itertools

import numpy as np
import pytest

from symgrad.op_base import broadcast_shapes

SHAPES = [(), (0,), (1,), (3,), (1, 3), (2, 1), (2, 3), (4, 1, 3), (0, 3), (3, 0)]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_as_numpy_broadcasts(count):
    for shapes in itertools.product(SHAPES, repeat=count):
        try:
            expected = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            with pytest.raises(ValueError, match="could not be broadcast"):
                broadcast_shapes(*shapes)
            continue
        got = broadcast_shapes(*shapes)
        assert got == expected and type(got) is tuple, shapes


def test_lists_and_no_shapes():
    assert broadcast_shapes([2, 3], (2, 3), ()) == (2, 3)
    assert broadcast_shapes() == ()
