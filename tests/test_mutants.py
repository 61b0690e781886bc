"""Wrong answers built by editing one line of a reference solution."""

import pytest
import torch

from autograd_lab_solutions._mutants import mutant


def double(x):
    return x * 2  # the line the tests mutate


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * 3


def test_a_mutated_function_differs_by_the_one_line():
    wrong = mutant(double, "return x * 2", "return x * 3")
    assert wrong(5) == 15 and double(5) == 10  # the reference itself is untouched


def test_a_mutated_autograd_function_keeps_its_forward():
    wrong = mutant(Scale, "return grad_output * 3", "return -grad_output * 3")
    x = torch.ones(2, requires_grad=True)
    wrong.apply(x).sum().backward()
    assert torch.equal(wrong.apply(x).detach(), torch.full((2,), 3.0))
    assert torch.equal(x.grad, torch.full((2,), -3.0))


def test_a_line_that_is_not_in_the_source_is_refused():
    with pytest.raises(ValueError, match="must occur exactly once"):
        mutant(double, "return x * 4", "return x")
