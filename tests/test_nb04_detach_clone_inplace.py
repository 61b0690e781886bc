"""04.squash's caller tells a fixed in-place write from one hidden behind detach() (labs/inplace.py)."""

import pytest
import torch
import torch.nn.functional as F

from autograd_lab.labs.inplace import InPlaceWriteBehindDetach, squash_with_second_derivative
from autograd_lab_solutions import nb04_detach_clone_inplace as nb04


def _x():
    return torch.randn(2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64).requires_grad_()


def test_the_broken_write_behind_detach_with_a_right_squash_straight_through_is_named():
    # adversarial round 3, E1 (docs/audits/adv-00-04-r2.md): values and both derivatives were right
    with pytest.raises(InPlaceWriteBehindDetach, match="detach"):
        squash_with_second_derivative(nb04._squash_detach_straight_through, _x())


def _clone_then_in_place(x):
    y = torch.sigmoid(x)
    gate = y * x
    mapped = y.clone()
    mapped.mul_(2).sub_(1)
    return gate + mapped * x


def _detach_for_a_check_only(x):
    out = nb04.squash(x)
    assert torch.isfinite(out.detach()).all()
    return out


@pytest.mark.parametrize("squash", [nb04.squash, _clone_then_in_place, _detach_for_a_check_only,
                                    lambda x: F.silu(x) + torch.tanh(x / 2) * x,
                                    lambda x: x * (3 * torch.sigmoid(x) - 1)])
def test_right_squashes_pass_the_caller_with_detach_kept_in_the_graph(squash):
    x = _x()
    assert torch.allclose(squash_with_second_derivative(squash, x), nb04.squash(x))


def test_a_factor_within_one_percent_of_one_is_not_called_a_sum_or_mean_factor():
    # adversarial round 4, 04.sgd_step: the decay applied after the step was reported as "1 times the expected one"
    from autograd_lab.checking.compare import _best_factor
    r = torch.linspace(1, 2, 5, dtype=torch.float64)
    assert _best_factor(r * (1 - 0.05 * 0.01), r) is None
    assert _best_factor(r * 3, r) == pytest.approx(3) and _best_factor(r / 4, r) == pytest.approx(0.25)
