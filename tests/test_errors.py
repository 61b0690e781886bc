import warnings

import pytest
import torch

from autograd_lab.labs.errors import expect_error, expect_warning


def test_expected_error_is_swallowed_and_printed(capsys):
    x = torch.ones(3, requires_grad=True)
    with expect_error(RuntimeError, "grad can be implicitly created only for scalar outputs") as caught:
        (x * 2).backward()
    assert isinstance(caught.error, RuntimeError)
    assert caught.message.startswith("grad can be implicitly created")
    assert "RuntimeError (expected): grad can be implicitly" in capsys.readouterr().out


def test_missing_error_fails_loudly():
    with pytest.raises(AssertionError, match="ran without error"):
        with expect_error(RuntimeError, "anything"):
            pass


def test_wrong_message_fails_and_shows_the_real_one():
    with pytest.raises(AssertionError, match="but got RuntimeError: something else"):
        with expect_error(RuntimeError, "expected start"):
            raise RuntimeError("something else")


def test_wrong_type_fails():
    with pytest.raises(AssertionError, match="but got ValueError"):
        with expect_error(RuntimeError, "boom"):
            raise ValueError("boom")


def test_any_of_several_prefixes_matches():
    with expect_error(RuntimeError, ("old wording", "new wording"), quiet=True) as caught:
        raise RuntimeError("new wording, and a tail that changes")
    assert caught.message.startswith("new wording")


def test_addresses_are_hidden_and_long_messages_cut():
    with expect_error(RuntimeError, "object at", max_lines=2, quiet=True) as caught:
        raise RuntimeError("object at 0x7f3a2b1c4d50\nline 2\nline 3\nline 4")
    assert caught.message == "object at 0x...\nline 2\n..."


def test_expected_warning_is_captured_not_printed_to_stderr(capsys):
    with expect_warning(UserWarning, "careful") as caught:
        warnings.warn("careful: this is taught")
        warnings.warn("unrelated", DeprecationWarning)
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "UserWarning (expected): careful: this is taught" in captured.out
    assert caught.others == ["unrelated"]


def test_real_pytorch_warning_on_non_leaf_grad():
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    with expect_warning(UserWarning, "The .grad attribute of a Tensor that is not a leaf Tensor", quiet=True):
        assert y.grad is None


def test_missing_warning_fails_loudly():
    with pytest.raises(AssertionError, match="no warnings at all"):
        with expect_warning(UserWarning, "never"):
            pass


def test_error_inside_expect_warning_is_not_hidden():
    with pytest.raises(ZeroDivisionError):
        with expect_warning(UserWarning, "x"):
            1 / 0


def test_always_sees_a_once_per_process_torch_warning_again_and_restores_the_setting():
    x = torch.ones(2, requires_grad=True)
    before = torch.is_warn_always_enabled()
    for _ in range(2):   # torch raises this one once per process; `always=True` sees it each time
        with expect_warning(UserWarning, "Using backward() with create_graph=True", quiet=True, always=True) as w:
            (x * 3).sum().backward(create_graph=True)
        assert w.count == 1
    assert torch.is_warn_always_enabled() is before
