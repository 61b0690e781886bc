"""Run every GPU measurement of the course and write a dated record under autograd_lab/labs/gpu_data/.

    python benchmarks/gpu_record.py            # on a machine with an NVIDIA GPU
    python benchmarks/gpu_record.py --only amp_precisions

The measurements are the functions registered with ``gpu_records.measurement`` (the
same code the notebooks run when they find a GPU).  The record names the machine, the
GPU, torch and CUDA, and the date; notebooks 05 and 06 show it to students without a
GPU.  Commit the JSON it writes.  Without a GPU it writes nothing and exits 1: GPU
numbers are never made up or typed by hand.  The records are package data
(``gpu_records.RECORDS_DIR``), so the student build and a wheel carry them.
"""

import argparse
import datetime
import json
import os
import platform
import re
import sys

import torch

from autograd_lab.labs import gpu_records


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="run only these measurements (repeatable)")
    parser.add_argument("--out", default=str(gpu_records.RECORDS_DIR))
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing measured, no record written.", file=sys.stderr)
        return 1
    measurements = gpu_records.discover()
    names = args.only or sorted(measurements)
    device = torch.device("cuda")
    record = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.node() or 'unnamed'}: {platform.machine()}, {os.cpu_count()} CPU cores",
        "gpu": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "measurements": {},
    }
    for name in names:
        print(f"measuring {name} ...", flush=True)
        record["measurements"][name] = gpu_records.as_record_entry(measurements[name](device))
    slug = re.sub(r"[^a-z0-9]+", "-", record["gpu"].lower()).strip("-")
    path = os.path.join(args.out, f"{record['date']}-{slug}.json")
    os.makedirs(args.out, exist_ok=True)
    with open(path, "w") as file:
        json.dump(record, file, indent=2)
        file.write("\n")
    print(f"wrote {path}")
    for name, table in record["measurements"].items():
        print(f"\n{name}\n{gpu_records.format_table(table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
