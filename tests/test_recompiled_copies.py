"""The tape knows a watched function by its code, also when its source is compiled again (adversarial round 5).

Round 5 got full marks in 08.shard and 07.coverage with the forbidden code's source
(``inspect.getsource``) renamed, edited and ``exec``'d from a string.  A copy under any
name with the same names, variables and constants is the function; code compiled from
text that no file or notebook cell holds is the function when most of them agree.  A
hand-written answer that does the same job is neither.
"""

import inspect
import linecache
import math
import textwrap
import types

import torch
from torch.utils.data import DistributedSampler

from autograd_lab.checking import tape as tape_module
from autograd_lab.checking.tape import Tape
from autograd_lab.labs import grad_report

SAMPLER = "code:torch.utils.data.distributed:DistributedSampler"
COVERAGE = "code:autograd_lab.labs.grad_report:optimizer_coverage"


def _exec(source, name, filename="<string>", **names):
    namespace = {"torch": torch, "math": math, **names}
    exec(compile(textwrap.dedent(source), filename, "exec"), namespace)
    return namespace[name]


def _fake_sampler(n, world_size, rank):
    per_rank = math.ceil(n / world_size)
    return types.SimpleNamespace(dataset=range(n), num_replicas=world_size, rank=rank, shuffle=False,
                                 drop_last=False, seed=0, epoch=0, num_samples=per_rank,
                                 total_size=per_rank * world_size)


def _facts(spec, call):
    with Tape((spec,)) as tape:
        call()
    return tape.facts()


def _hand_written_shard(n, world_size, rank):
    indices = list(range(n))
    total = math.ceil(n / world_size) * world_size
    while len(indices) < total:
        indices += indices[:total - len(indices)]
    return indices[rank:total:world_size]


def _hand_written_coverage(model, optimizer):
    optimised = {id(p) for group in optimizer.param_groups for p in group["params"]}
    named = list(model.named_parameters())
    return {"missing": [name for name, p in named if p.requires_grad and id(p) not in optimised],
            "frozen": [name for name, p in named if not p.requires_grad and id(p) in optimised]}


def _model_and_optimizer():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    optimizer = object.__new__(torch.optim.Optimizer)     # a built SGD costs seconds on its first use (dynamo)
    optimizer.param_groups = [{"params": list(model[0].parameters())}]
    return model, optimizer


def test_a_renamed_copy_of_the_source_is_the_function():
    source = inspect.getsource(DistributedSampler.__iter__).replace("def __iter__(self) -> Iterator[_T_co]:",
                                                                     "def _it(self):")
    iterate = _exec(source, "_it")
    facts = _facts(SAMPLER, lambda: list(iterate(_fake_sampler(5, 2, 1))))
    assert facts["ran"].get(SAMPLER) and facts["recompiled"].get(SAMPLER)


def test_an_edited_copy_execd_from_a_string_is_the_function():
    source = inspect.getsource(grad_report.optimizer_coverage).replace("def optimizer_coverage", "def _mine")
    mine = _exec(source.replace("_require_module(model)", ""), "_mine")
    model, optimizer = _model_and_optimizer()
    facts = _facts(COVERAGE, lambda: mine(model, optimizer))
    assert facts["ran"].get(COVERAGE) and facts["recompiled"].get(COVERAGE)


def test_an_edited_copy_compiled_under_the_librarys_file_name_is_the_function():
    source = inspect.getsource(grad_report.optimizer_coverage).replace("def optimizer_coverage", "def _mine")
    mine = _exec(source.replace("_require_module(model)", ""), "_mine", filename=grad_report.__file__)
    model, optimizer = _model_and_optimizer()
    assert _facts(COVERAGE, lambda: mine(model, optimizer))["ran"].get(COVERAGE)


def test_hand_written_answers_are_not_copies_wherever_their_text_lives():
    model, optimizer = _model_and_optimizer()
    answers = {SAMPLER: (_hand_written_shard, (5, 2, 1)), COVERAGE: (_hand_written_coverage, (model, optimizer))}
    for spec, (answer, args) in answers.items():
        assert not _facts(spec, lambda: answer(*args))["ran"], spec           # in a file
        from_text = _exec(inspect.getsource(answer), answer.__name__)          # exec'd: no file holds the text
        assert not _facts(spec, lambda: from_text(*args))["ran"], spec
        assert from_text(*args) == answer(*args)


def test_code_from_a_notebook_cell_has_text():
    linecache.cache["/tmp/ipykernel_1/cell.py"] = (1, None, ["x = 1\n"], "/tmp/ipykernel_1/cell.py")
    try:
        assert not tape_module._text_unseen("/tmp/ipykernel_1/cell.py")
    finally:
        del linecache.cache["/tmp/ipykernel_1/cell.py"]
    assert tape_module._text_unseen("<string>") and not tape_module._text_unseen(tape_module.__file__)
