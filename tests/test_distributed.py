"""launch() runs real gloo ranks on loopback, returns their results, and never hangs."""

import pytest
import torch
import torch.nn.functional as F

from autograd_lab import ddp_scenarios as scenarios
from autograd_lab.distributed import RankError, launch


def _full_batch_grads(n, reduction="mean"):
    model = scenarios.make_model()
    x, y = scenarios.make_data(n)
    F.mse_loss(model(x), y, reduction=reduction).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def test_one_ddp_step_on_two_ranks_equals_one_step_on_the_whole_batch():
    run = launch(scenarios.ddp_step, world_size=2, timeout=120, batch_per_rank=4)
    assert run.ok, run.errors
    expected = _full_batch_grads(8)
    for rank in (0, 1):
        for name, grad in run.results[rank]["grads"].items():
            torch.testing.assert_close(grad, expected[name])


def test_no_sync_needs_the_forward_inside_to_skip_all_reduces():
    runs = {flag: launch(scenarios.accumulate, timeout=120, micro_batches=4, forward_in_no_sync=flag)
            for flag in (True, False)}
    assert runs[True].results[0]["allreduces"] == 1
    assert runs[False].results[0]["allreduces"] == 4
    expected = _full_batch_grads(16)
    for name, grad in runs[True].results[1]["grads"].items():
        torch.testing.assert_close(grad, expected[name])


def test_a_rank_that_skips_backward_makes_the_other_time_out_and_launch_stops_it():
    run = launch(scenarios.skip_backward, timeout=60, grace=1.0, wait_seconds=2.0, stall_seconds=60)
    assert not run.ok
    assert 0 in run.errors and run.terminated == [1]
    assert run.seconds < 30
    with pytest.raises(RankError, match="^Timed out"):
        run.raise_errors()


def test_unused_parameters_fail_without_find_unused_parameters():
    failing = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=False)
    with pytest.raises(RankError, match="Expected to have finished reduction"):
        failing.raise_errors()
    fixed = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=True)
    assert fixed.ok and fixed.results[0]["aux_grad_is_none"]


def test_launch_refuses_functions_spawn_cannot_import():
    def local_scenario(rank, world_size):
        return {}
    with pytest.raises(TypeError, match="module-level function"):
        launch(local_scenario)
    with pytest.raises(ValueError, match="world_size"):
        launch(scenarios.ddp_step, world_size=0)


def test_ddp_starts_every_rank_from_rank_0s_weights():
    run = launch(scenarios.initial_weights, timeout=120)
    assert run.ok, run.errors
    expected = scenarios.make_model(seed=0).state_dict()
    for rank in (0, 1):
        for name, weight in run.results[rank]["weights"].items():
            assert torch.equal(weight, expected[name])


def test_an_unused_parameter_leaves_the_first_step_unsynchronised():
    run = launch(scenarios.unused_parameters, timeout=120, find_unused_parameters=False, steps=1)
    assert run.ok, run.errors
    model = scenarios.make_model()
    x, y = scenarios.make_data(8)
    F.mse_loss(model(x[:4]), y[:4]).backward()          # rank 0's own shard, alone
    for name, grad in run.results[0]["body_grads"].items():
        torch.testing.assert_close(grad, dict(model.named_parameters())[name].grad)


def test_batchnorm_statistics_differ_per_rank_until_ddp_broadcasts_rank_0s():
    run = launch(scenarios.batchnorm_statistics, timeout=120)
    assert run.ok, run.errors
    first, second = run.results[0], run.results[1]
    assert not torch.allclose(first["running_mean"], second["running_mean"])
    assert torch.equal(second["running_mean_after_eval_forward"], first["running_mean"])
    synced = launch(scenarios.batchnorm_statistics, timeout=120, sync=True)
    with pytest.raises(RankError, match="SyncBatchNorm layers only work with GPU modules"):
        synced.raise_errors()
