"""Graph rendering at scale: autograd_lab.viz against torchviz 0.0.3, in one run.

An RNN cell ``h = tanh(x_t @ Wx + h @ Wh + b)`` is unrolled T steps, so the three
weights are shared by every step: the case where torchviz's layout explodes.
For each T we time

* traverse: building the graph description (``draw`` / ``make_dot``, no layout);
* SVG: that plus graphviz's ``dot -Tsvg`` layout, what a notebook waits for,
  as wall-clock time and as CPU time (this process plus ``dot``).  On a shared,
  busy machine the wall-clock time is inflated by waiting for a core; the CPU
  time is what the work itself costs.

Ours is timed with the defaults a student gets (``max_nodes=1000``: larger graphs
are summarised honestly) and, separately, drawing every node (``max_nodes=None``).
torchviz runs in a subprocess killed after 60 s and is then reported as
"> 60 s (capped)".  torchviz is optional: install it where this script looks,

    python -m pip install --no-deps --target /tmp/peer-site torchviz==0.0.3

(or set PEER_SITE), and it is reported as "not installed" when absent.

Run:  .venv/bin/python benchmarks/viz_scaling.py [--steps 10 30 50 100 300 1000] [--cap 60]

Real models (``--models``, issue 24): torchvision's resnet18 (train mode, 1x3x64x64),
GPT-2 with 2 layers (n_embd 64) and 12 layers (n_embd 768, GPT-2 small's shape) and
BERT-tiny (2 layers, hidden 128), all built from configs (transformers, no weights
downloaded), 16 tokens.  Each tool runs forward + graph + SVG, alternating in this one
process on the same model: ``draw(loss, params=...).svg()`` (in-process layout), the
same forced onto a ``dot`` process, torchviz's ``make_dot(...).pipe("svg")`` and
torchview's ``draw_graph(...).visual_graph.pipe("svg")``.  Nothing is cached between
runs: each run makes a new graph and lays it out.  Reported is CPU time (this process
plus the ``dot`` children, from ``resource.getrusage``), not wall time, because the
machine is shared.  torchvision from PyPI does not import beside the course's pinned
torch, so this mode needs its own venv outside the clone::

    python3 -m venv ~/.cache/autograd-lab/venvs/bench-viz
    ~/.cache/autograd-lab/venvs/bench-viz/bin/pip install torch==2.14.1 torchvision==0.29.1 \\
        torchviz torchview transformers
    ~/.cache/autograd-lab/venvs/bench-viz/bin/pip install --no-deps -e .
    OMP_NUM_THREADS=1 ~/.cache/autograd-lab/venvs/bench-viz/bin/python benchmarks/viz_scaling.py --models --runs 9

``--layouts`` (same venv, plus ``pip install pygraphviz``, which builds against Debian's
``libgraphviz-dev``) times the ways of running graphviz on the same DOT text: a ``dot``
process, pygraphviz, libgvc with every plugin (pango measures the text) and libgvc with
the core and layout plugins only (what ``draw`` uses), each in its own process.
"""

import argparse
import datetime
import json
import os
import resource
import platform
import signal
import subprocess
import sys
import time

import torch

from autograd_lab import draw

PEER_SITE = os.environ.get("PEER_SITE", "/tmp/peer-site")
STEPS = (10, 30, 50, 100, 300, 1000)
HIDDEN = 16

RNN_SOURCE = f"""
import torch

def rnn_loss(steps, hidden={HIDDEN}):
    torch.manual_seed(0)
    Wx = torch.randn(4, hidden, requires_grad=True)
    Wh = torch.randn(hidden, hidden, requires_grad=True)
    b = torch.zeros(hidden, requires_grad=True)
    h = torch.zeros(1, hidden)
    for _ in range(steps):
        h = torch.tanh(torch.randn(1, 4) @ Wx + h @ Wh + b)
    return h.sum(), dict(Wx=Wx, Wh=Wh, b=b)
"""
exec(RNN_SOURCE)  # defines rnn_loss here; the peer's subprocess runs the very same text

PEER_SCRIPT = RNN_SOURCE + """
import json, sys, time
sys.path.insert(0, {site!r})
try:
    from torchviz import make_dot
except ImportError:
    print(json.dumps({{"missing": True}}), flush=True)
    sys.exit(0)
import resource

def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

loss, params = rnn_loss({steps})
start, start_cpu = time.perf_counter(), cpu()
try:
    graph = make_dot(loss, params=params)
except RecursionError:
    print(json.dumps({{"traverse_error": "RecursionError"}}), flush=True)
    sys.exit(0)
print(json.dumps({{"traverse": time.perf_counter() - start}}), flush=True)
graph.pipe(format="svg")
print(json.dumps({{"svg": time.perf_counter() - start, "svg_cpu": cpu() - start_cpu}}), flush=True)
"""


def cpu_seconds():
    """CPU time of this process and of the children it has waited for (``dot``)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def time_ours(steps, max_nodes, cap):
    """(traverse s, SVG wall s, SVG CPU s, nodes drawn) for one fresh graph; SVG None past the cap."""
    loss, params = rnn_loss(steps)
    start, start_cpu = time.perf_counter(), cpu_seconds()
    graph = draw(loss, params=params, max_nodes=max_nodes, layout_timeout=cap)
    traverse = time.perf_counter() - start
    try:
        graph.svg()
    except RuntimeError:          # LayoutError: graphviz ran past the cap
        return traverse, None, None, len(graph.nodes)
    return traverse, time.perf_counter() - start, cpu_seconds() - start_cpu, len(graph.nodes)


def best_of(runs, steps, max_nodes, cap):
    """Best of ``runs`` for each figure (the machine is shared: the minimum is the least disturbed)."""
    results = [time_ours(steps, max_nodes, cap) for _ in range(runs)]
    done = [r for r in results if r[1] is not None]
    best = (lambda i: min(r[i] for r in done)) if done else (lambda i: None)
    return min(r[0] for r in results), best(1), best(2), results[0][3]


def time_peer(steps, cap):
    """torchviz in its own process group, so that a capped run also kills its ``dot``."""
    script = PEER_SCRIPT.format(site=PEER_SITE, steps=steps)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=cap)
        capped = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        capped = True
    result = {}
    for line in out.splitlines():
        result.update(json.loads(line))
    result["capped"] = capped
    return result


def seconds(value):
    return "-" if value is None else f"{value:.3f} s"


def wall_and_cpu(wall, cpu):
    return f"{wall:.3f} s / {cpu:.3f} s"


def peer_cells(peer, cap):
    if peer.get("missing"):
        return "not installed", "not installed"
    if "traverse_error" in peer:
        return peer["traverse_error"], peer["traverse_error"]
    capped = f"> {cap:g} s (capped)"
    traverse = seconds(peer["traverse"]) if "traverse" in peer else capped
    svg = wall_and_cpu(peer["svg"], peer["svg_cpu"]) if "svg" in peer else capped
    return traverse, svg


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    dot = subprocess.run(["dot", "-V"], capture_output=True, text=True).stderr.strip()
    return (f"{cpu}, {os.cpu_count()} cores, load average {load} at the start; "
            f"torch {torch.__version__}, {dot}, Python {platform.python_version()}")


MODELS = ("resnet18", "gpt2-2", "gpt2-12", "bert-tiny")


def real_models(names=MODELS):
    """(name, model, forward) for each real model of ``--models``: ``forward()`` returns the loss."""
    import torchvision
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    if "resnet18" in names:
        resnet = torchvision.models.resnet18(num_classes=10)
        image = torch.randn(1, 3, 64, 64)
        yield "resnet18 (1x3x64x64)", resnet, (image,), lambda: resnet(image).sum()
    tokens = torch.randint(0, 1000, (1, 16))
    for layers, width, heads in ((2, 64, 2), (12, 768, 12)):
        if f"gpt2-{layers}" not in names:
            continue
        config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=1000, n_positions=64,
                            bos_token_id=0, eos_token_id=0)
        gpt2 = GPT2LMHeadModel(config)
        label = f"GPT-2, {layers} layers, n_embd {width} (1x16 tokens)"
        yield label, gpt2, (tokens,), (lambda m=gpt2: m(tokens, labels=tokens).loss)
    if "bert-tiny" in names:   # google/bert_uncased_L-2_H-128_A-2's shape, built from a config
        config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                            vocab_size=1000)
        bert = BertForMaskedLM(config)
        yield "BERT-tiny, 2 layers, hidden 128 (1x16 tokens)", bert, (tokens,), \
            lambda: bert(tokens, labels=tokens).loss


def cpu_of(render):
    start = cpu_seconds()
    render()
    return cpu_seconds() - start


def _torchview(model, inputs):
    from torchview import draw_graph
    return draw_graph(model, input_data=list(inputs), device="cpu").visual_graph.pipe(format="svg")


def compare_models(runs, names=MODELS):
    """Forward + graph + SVG for each tool, alternating in this one process, on the same model."""
    from torchviz import make_dot
    from autograd_lab.viz import layout
    params_of = {}

    def ours(loss, model):
        return draw(loss, params=params_of[id(model)]).svg()

    def ours_process(loss, model):
        os.environ["AUTOGRAD_LAB_LAYOUT"] = "process"
        try:
            return draw(loss, params=params_of[id(model)]).svg()
        finally:
            del os.environ["AUTOGRAD_LAB_LAYOUT"]

    def torchviz(loss, model):
        return make_dot(loss, params=params_of[id(model)]).pipe(format="svg")

    tools = {"ours": ours, "ours, dot process": ours_process, "torchviz": torchviz}
    print(f"Ours lays out through: {layout.backend()}. Each cell: CPU seconds, min / median of {runs} runs.\n")
    print("| model | grad_fns | ours: nodes | forward | graph + SVG: " + " | ".join(tools)
          + " | torchview: forward + graph + SVG | torchviz / ours | torchview / (forward + ours) |")
    print("|---|---:|---:|---:|" + "---:|" * (len(tools) + 3))
    for name, model, inputs, forward in real_models(names):
        params_of[id(model)] = dict(model.named_parameters())
        times = {tool: [] for tool in ("forward", *tools, "torchview")}
        failed = {}
        for _ in range(runs):   # alternate, so that load on the shared machine hits every tool alike
            losses = []
            times["forward"].append(cpu_of(lambda: losses.append(forward())))
            for tool, run in tools.items():
                times[tool].append(cpu_of(lambda: run(losses[0], model)))
            if "torchview" not in failed:
                try:
                    times["torchview"].append(cpu_of(lambda: _torchview(model, inputs)))
                except Exception as error:  # noqa: BLE001 - a peer that crashes is reported, not fatal
                    failed["torchview"] = f"fails: {type(error).__name__}"
        graph = draw(forward(), params=params_of[id(model)])
        best = {tool: min(xs) for tool, xs in times.items() if xs}
        cells = [failed[tool] if tool in failed else
                 f"{sorted(times[tool])[0]:.3f} / {sorted(times[tool])[len(times[tool]) // 2]:.3f}"
                 for tool in times]
        view = (f"{best['torchview'] / (best['forward'] + best['ours']):.2f}x" if "torchview" in best else "-")
        print(f"| {name} | {len(graph.ops())} | {len(graph.nodes)} | " + " | ".join(cells)
              + f" | {best['torchviz'] / best['ours']:.2f}x | {view} |", flush=True)
    tiny = min(cpu_of(lambda: subprocess.run(["dot", "-Tsvg"], input=b"digraph { a -> b }",
                                             capture_output=True)) for _ in range(runs))
    print(f"\n`dot -Tsvg` on a 2-node graph costs {tiny:.3f} s of CPU time (the floor under a dot process).")


CANDIDATE_SCRIPT = """
import ctypes, json, resource, subprocess, sys
kind, runs, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

if kind == "dot process":
    lay = lambda s: subprocess.run(["dot", "-Tsvg"], input=s.encode(), capture_output=True, check=True).stdout
elif kind == "pygraphviz":
    import pygraphviz
    lay = lambda s: pygraphviz.AGraph(string=s).draw(format="svg", prog="dot")
elif kind == "libgvc, every plugin":
    from autograd_lab.viz import layout
    gvc, cgraph = layout._open("gvc"), layout._open("cgraph")
    gvc.gvContext.restype = cgraph.agmemread.restype = ctypes.c_void_p
    library = layout._library()
    library._context = gvc.gvContext()          # graphviz's own plugin set: pango measures the text
    lay = lambda s: library.render(s, "svg", "dot")
else:
    from autograd_lab.viz import layout
    lay = lambda s: layout._library().render(s, "svg", "dot")
lay("digraph { a -> b }")   # plugins load once per process: not part of a picture's cost
found = {}
for path in paths:
    source = open(path).read()
    times = []
    for _ in range(runs):
        start = cpu()
        lay(source)
        times.append(cpu() - start)
    found[path] = sorted(times)
print(json.dumps(found))
"""
CANDIDATES = ("dot process", "pygraphviz", "libgvc, every plugin", "libgvc, core plugins (ours)")


def compare_layouts(runs, names=MODELS):
    """Layout + SVG of the same DOT text (ours, per model) by each way of running graphviz.

    Each candidate runs in its own process: pygraphviz and a second libgvc context both
    load graphviz's pango plugin, and two copies of its GLib types in one process hang.
    """
    import tempfile
    folder = tempfile.mkdtemp(prefix="viz-layouts-")
    paths = {}
    for name, model, _, forward in real_models(names):
        paths[name] = os.path.join(folder, f"{len(paths)}.dot")
        with open(paths[name], "w") as out:
            out.write(draw(forward(), params=dict(model.named_parameters())).source)
    print(f"Layout + SVG of the DOT text draw() makes, CPU seconds (min / median of {runs}).\n")
    print("| model | " + " | ".join(CANDIDATES) + " |")
    print("|---|" + "---:|" * len(CANDIDATES))
    results = {kind: {path: [] for path in paths.values()} for kind in CANDIDATES}
    for _ in range(runs):   # rounds, each candidate once per round: the machine's load hits all alike
        for kind in CANDIDATES:
            if not isinstance(results[kind], dict):
                continue
            done = subprocess.run([sys.executable, "-c", CANDIDATE_SCRIPT, kind, "1", *paths.values()],
                                  capture_output=True, text=True)
            if done.returncode != 0:
                results[kind] = (done.stderr.strip().splitlines() or ["no output"])[-1]
                continue
            for path, times in json.loads(done.stdout).items():
                results[kind][path] += times
    for r in results.values():
        if isinstance(r, dict):
            for times in r.values():
                times.sort()
    for name, path in paths.items():
        cells = [f"{r[path][0]:.4f} / {r[path][len(r[path]) // 2]:.4f}" if isinstance(r, dict) else f"fails: {r}"
                 for r in (results[kind] for kind in CANDIDATES)]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", choices=MODELS, default=None,
                        help="real models against torchviz and torchview (needs the bench-viz venv); "
                             "no names: all four")
    parser.add_argument("--layouts", nargs="*", choices=MODELS, default=None,
                        help="the ways to run graphviz (dot process, pygraphviz, libgvc) on the same DOT text")
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS))
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a run is killed")
    parser.add_argument("--runs", type=int, default=3, help="runs of ours per T (best is reported)")
    args = parser.parse_args(argv)

    print(f"Measured {datetime.date.today().isoformat()} on {machine()}.\n")
    if args.layouts is not None:
        compare_layouts(max(args.runs, 5), tuple(args.layouts) or MODELS)
        return
    if args.models is not None:
        compare_models(max(args.runs, 5), tuple(args.models) or MODELS)
        print(f"\nLoad average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}.")
        return
    print("SVG columns: wall-clock / CPU time.\n")
    print("| T | nodes drawn (default) | ours: traverse | ours: SVG | ours: SVG, every node "
          "| torchviz: traverse | torchviz + dot: SVG | SVG speed-up (wall) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for steps in args.steps:
        runs = args.runs if steps <= 300 else 1
        traverse, svg, svg_cpu, drawn = best_of(runs, steps, 1000, args.cap)
        _, svg_all, svg_all_cpu, total = best_of(runs, steps, None, args.cap)
        peer = time_peer(steps, args.cap)
        peer_traverse, peer_svg = peer_cells(peer, args.cap)
        if "svg" in peer and svg:
            speedup = f"{peer['svg'] / svg:.0f}x"
        elif peer.get("capped") and svg:
            speedup = f"> {args.cap / svg:.0f}x"
        else:
            speedup = "-"
        capped = f"> {args.cap:g} s (capped)"
        ours = wall_and_cpu(svg, svg_cpu) if svg is not None else capped
        every = wall_and_cpu(svg_all, svg_all_cpu) if svg_all is not None else capped
        print(f"| {steps} | {drawn} of {total} | {seconds(traverse)} | {ours} | {every} "
              f"| {peer_traverse} | {peer_svg} | {speedup} |", flush=True)


if __name__ == "__main__":
    main()
