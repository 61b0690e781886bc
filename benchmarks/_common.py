"""What the model-timing benchmarks share: their size options and the line that dates a table."""

import argparse
import datetime
import os
import platform

import torch


def timing_parser(description, *, width, batch, gpu_width, gpu_batch):
    """An argument parser with the CPU and GPU sizes, ``--repeat`` and ``--threads``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--width", type=int, default=width)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--gpu-width", type=int, default=gpu_width)
    parser.add_argument("--gpu-batch", type=int, default=gpu_batch)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (1 gives stable timings on a machine shared with other jobs)")
    return parser


def parse(parser, argv):
    """Parse the arguments and apply ``--threads`` before anything is timed."""
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def measured_on():
    """The closing line of every table: when, on what, and how busy the machine was."""
    return (f"Measured {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPU cores, "
            f"torch {torch.__version__}; 1-minute load average at the end: {os.getloadavg()[0]:.1f}.")
