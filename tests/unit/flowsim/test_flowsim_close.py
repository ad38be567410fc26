"""The fixed point's convergence test (flowsim.rates._close) answers as np.allclose with the
solver's tolerances, on the cases where the two could part: infinities, NaN, both tolerances."""
import numpy as np
import pytest

from flowsim.rates import _close

CASES = [
    ([], []),
    ([1e9], [1e9 * (1 + 5e-10)]),      # within rtol
    ([1e9], [1e9 * (1 + 5e-9)]),       # outside rtol
    ([0.0], [5e-7]),                   # within atol
    ([0.0], [2e-6]),                   # outside atol
    ([np.inf], [np.inf]),              # equal infinities are close
    ([-np.inf], [np.inf]),
    ([5e-7], [np.inf]),                # a finite and an infinite value are not
    ([np.inf], [5e-7]),
    ([np.nan], [np.nan]),              # NaN is close to nothing
    ([1.0, np.inf, 0.0], [1.0, np.inf, 1e-7]),
]


@pytest.mark.parametrize("a, b", CASES)
def test_close_is_allclose(a, b):
    a, b = np.array(a, float), np.array(b, float)
    assert _close(a, b) == np.allclose(a, b, rtol=1e-9, atol=1e-6)
    assert _close(b, a) == np.allclose(b, a, rtol=1e-9, atol=1e-6)
