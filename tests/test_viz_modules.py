"""record_modules: every op sits in the module call that ran it, and collapsed graphs have no cycles."""

from collections import deque

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autograd_lab.viz import draw, record_modules


class BasicBlock(nn.Module):
    """torchvision's resnet BasicBlock (the same layers and forward)."""

    def __init__(self, planes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class GPT2Block(nn.Module):
    """A GPT-2 block: pre-norm causal attention and MLP, each with a residual add."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def attn(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def acyclic(graph):
    inputs = {n.id: 0 for n in graph.nodes}
    consumers = {n.id: [] for n in graph.nodes}
    for src, dst in graph.edges:
        inputs[dst] += 1
        consumers[src].append(dst)
    ready, seen = deque(n for n, k in inputs.items() if k == 0), 0
    while ready:
        seen += 1
        for dst in consumers[ready.popleft()]:
            inputs[dst] -= 1
            if inputs[dst] == 0:
                ready.append(dst)
    return seen == len(graph.nodes)


def test_relu_and_residual_add_belong_to_the_basic_block():
    torch.manual_seed(0)
    model = nn.Sequential(BasicBlock(), nn.ReLU(), BasicBlock(), nn.Flatten(), nn.LazyLinear(2))
    x = torch.randn(1, 4, 6, 6)
    model(x)  # materialise LazyLinear
    with record_modules(model):
        loss = model(x).sum()
    g = draw(loss, group_modules=model)
    clusters = {n.op: n.cluster for n in g.nodes if n.op in ("AddBackward0",)}
    assert clusters["AddBackward0"][0] in ("0", "2")
    assert all(n.cluster for n in g.nodes if n.op in ("ReluBackward0", "AddBackward0", "ConvolutionBackward0"))
    for depth in (1, 2):
        collapsed = draw(loss, group_modules=model, depth=depth)
        assert acyclic(collapsed)
    top = draw(loss, group_modules=model, depth=1)
    assert [n.name for n in top.nodes if n.kind == "summary"] == ["4", "3", "2", "1", "0"]


def test_one_module_called_twice_is_two_boxes_and_no_cycle():
    torch.manual_seed(0)
    block = BasicBlock()
    model = nn.ModuleDict({"block": block})
    x = torch.randn(1, 4, 5, 5, requires_grad=True)
    with record_modules(model):
        loss = F.relu(block(F.relu(block(x)))).sum()
    collapsed = draw(loss, group_modules=model, depth=1)
    boxes = [n.label.split("\n")[0] for n in collapsed.nodes if n.kind == "summary"]
    assert sorted(boxes) == ["block: BasicBlock", "block: BasicBlock (call 2)"]
    assert acyclic(collapsed)


def test_gpt2_block_attention_maths_stays_inside_and_collapses_acyclic():
    torch.manual_seed(0)
    model = nn.Sequential(GPT2Block(), GPT2Block())
    with record_modules(model):
        loss = model(torch.randn(1, 5, 8)).sum()
    g = draw(loss, group_modules=model)
    sdpa = [n for n in g.nodes if n.op and "Attention" in n.op]
    assert sdpa and all(n.cluster[:1] in (("0",), ("1",)) for n in sdpa)
    for depth in (1, 2):
        assert acyclic(draw(loss, group_modules=model, depth=depth))


def test_tied_weight_is_drawn_where_both_modules_use_it():
    torch.manual_seed(0)
    emb, head = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = nn.ModuleDict({"wte": emb, "lm_head": head})
    with record_modules(model):
        loss = head(emb(torch.tensor([1, 2]))).sum()
    g = draw(loss, group_modules=model)
    [tied] = [n for n in g.nodes if n.kind == "leaf"]
    assert tied.cluster == ()                      # not inside the wte box
    assert {n.cluster for n in g.nodes if n.kind == "op" and n.cluster} == {("wte",), ("lm_head",)}


def test_recording_leaves_no_hooks_behind():
    model = nn.Sequential(nn.Linear(2, 2))
    with record_modules(model):
        model(torch.randn(1, 2))
    assert not model[0]._forward_hooks and not model[0]._forward_pre_hooks


def import_or_skip(name):
    """Like pytest.importorskip, but also for a package that raises something else at import:
    PyPI's torchvision beside the course's CPU torch raises RuntimeError (operator
    torchvision::nms does not exist), which importorskip lets through as an error."""
    try:
        return __import__(name)
    except Exception as error:  # noqa: BLE001 - any failure to import means: not usable here
        pytest.skip(f"{name} cannot be imported here: {type(error).__name__}: {error}")


def test_real_resnet18_and_gpt2_collapse_without_cycles():
    torchvision = import_or_skip("torchvision")
    transformers = import_or_skip("transformers")
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=10)
    with record_modules(resnet):
        loss = resnet(torch.randn(2, 3, 32, 32)).sum()
    for depth in (1, 2, 3):
        assert acyclic(draw(loss, group_modules=resnet, depth=depth, max_nodes=None))
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=16,
                                     bos_token_id=0, eos_token_id=0)
    gpt2 = transformers.GPT2LMHeadModel(config)
    tokens = torch.randint(0, 50, (1, 6))
    with record_modules(gpt2):
        loss = gpt2(tokens, labels=tokens).loss
    for depth in (1, 2, 3):
        assert acyclic(draw(loss, group_modules=gpt2, depth=depth, max_nodes=None))
    g = draw(loss, group_modules=gpt2, max_nodes=None)
    wte = [n for n in g.nodes if n.kind == "leaf" and n.name == "transformer.wte.weight"]
    assert wte and wte[0].cluster[:2] != ("transformer", "wte")
