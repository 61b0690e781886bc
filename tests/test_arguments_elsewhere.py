"""Arguments changed where the answer ran on copies of them (08.no_sync_loop's ranks; adversarial round 5, d08j)."""

import pickle

import torch

from autograd_lab.checking import get, untouched
from autograd_lab.checking.judge import touched_finding


def test_a_process_that_got_copies_reports_what_the_answer_changed_in_the_callers_terms():
    watch = pickle.loads(pickle.dumps(untouched.Elsewhere()))     # it travels to the other process by name
    batches = [(torch.ones(2, 3), torch.ones(2, 1)), (torch.ones(1, 3), torch.ones(1, 1))]
    model = torch.nn.Linear(3, 1)
    before = watch.snapshot((model, batches))
    batches.pop()
    model(torch.ones(1, 3)).sum().backward()
    found = watch.changes(before)
    assert {"argument": 1, "path": "#1", "what": "items"} in found
    assert {"argument": 0, "path": "#0.weight", "what": "grad"} in found
    here = untouched.Elsewhere()
    here.report([dict(entry, path="#1[1]") if entry["argument"] == 1 else entry for entry in found] * 2)
    assert here.found.count({"argument": 1, "path": "#1[1]", "what": "items"}) == 1    # reported once


def test_the_no_sync_loop_allows_its_gradients_and_nothing_else():
    exercise = get("08.no_sync_loop")
    grads = {"touched": [{"argument": 0, "path": "#0.weight", "what": "grad"}]}
    popped = {"touched": grads["touched"] + [{"argument": 1, "path": "#1[0]", "what": "items"}]}
    assert touched_finding(exercise, grads) is None
    finding = touched_finding(exercise, popped)
    assert finding.tag == "modified_input"
    assert "`micro_batches[0]` (its items)" in finding.message and "pop" in finding.message
    assert "detach().clone()" not in finding.message        # a tensor's remedy, not a list's
