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

Real models (``--models``): torchvision's resnet18, a 2-layer GPT-2 built from a
config (transformers, no weights downloaded) and the RNN at T=10 and T=20, each drawn
to SVG by ``draw`` and by torchviz's ``make_dot(...).pipe("svg")`` in this one
process, alternating, on the same graph.  Reported is CPU time (this process plus
the ``dot`` children, from ``resource.getrusage``), not wall time, because the
machine is shared.  torchvision from PyPI does not import beside the course's
pinned torch, so this mode needs its own venv outside the clone::

    python3 -m venv ~/.cache/autograd-lab/venvs/bench-viz
    ~/.cache/autograd-lab/venvs/bench-viz/bin/pip install torch==2.14.1 torchvision==0.29.1 torchviz transformers
    ~/.cache/autograd-lab/venvs/bench-viz/bin/pip install --no-deps -e .
    ~/.cache/autograd-lab/venvs/bench-viz/bin/python benchmarks/viz_scaling.py --models
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


def real_models():
    """(name, loss, named parameters) for each real model of ``--models``."""
    import torchvision
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    resnet = torchvision.models.resnet18(num_classes=10)
    yield "resnet18 (1x3x64x64)", resnet(torch.randn(1, 3, 64, 64)).sum(), dict(resnet.named_parameters())
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000, n_positions=64,
                        bos_token_id=0, eos_token_id=0)
    gpt2 = GPT2LMHeadModel(config)
    tokens = torch.randint(0, 1000, (1, 16))
    yield "GPT-2, 2 layers, n_embd 64 (1x16 tokens)", gpt2(tokens, labels=tokens).loss, dict(gpt2.named_parameters())
    for steps in (10, 20):
        loss, params = rnn_loss(steps)
        yield f"RNN, T={steps}", loss, params


def cpu_of(render):
    start = cpu_seconds()
    render()
    return cpu_seconds() - start


def compare_models(runs):
    from torchviz import make_dot
    print("| model | grad_fns | ours: nodes drawn | ours: draw+SVG CPU (min / median) "
          "| torchviz: draw+SVG CPU (min / median) | speed-up (min) | ours / torchviz: Python part (min) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, loss, params in real_models():
        ours, peer = [], []
        for _ in range(runs):   # alternate, so that load on the shared machine hits both alike
            ours.append(cpu_of(lambda: draw(loss, params=params).svg()))
            peer.append(cpu_of(lambda: make_dot(loss, params=params).pipe(format="svg")))
        graph = draw(loss, params=params)
        ours_py = min(cpu_of(lambda: draw(loss, params=params).source) for _ in range(runs))
        peer_py = min(cpu_of(lambda: make_dot(loss, params=params).source) for _ in range(runs))
        ours.sort(), peer.sort()
        print(f"| {name} | {len(graph.ops())} | {len(graph.nodes)} | {ours[0]:.3f} s / {ours[runs // 2]:.3f} s "
              f"| {peer[0]:.3f} s / {peer[runs // 2]:.3f} s | {peer[0] / ours[0]:.1f}x "
              f"| {ours_py:.4f} s / {peer_py:.4f} s |", flush=True)
    tiny = min(cpu_of(lambda: subprocess.run(["dot", "-Tsvg"], input=b"digraph { a -> b }",
                                             capture_output=True)) for _ in range(runs))
    print(f"\n`dot -Tsvg` on a 2-node graph costs {tiny:.3f} s of CPU time: a floor under both columns.")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", action="store_true",
                        help="resnet18, GPT-2 and the RNN against torchviz (needs the bench-viz venv)")
    parser.add_argument("--steps", type=int, nargs="+", default=list(STEPS))
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a run is killed")
    parser.add_argument("--runs", type=int, default=3, help="runs of ours per T (best is reported)")
    args = parser.parse_args(argv)

    print(f"Measured {datetime.date.today().isoformat()} on {machine()}.\n")
    if args.models:
        compare_models(max(args.runs, 5))
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
