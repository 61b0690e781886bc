"""The ``autograd-lab`` command.  Each subcommand lives in its own module."""

import argparse
import sys


def _doctor(args):
    from autograd_lab import doctor

    return doctor.main(args)


def build_parser():
    parser = argparse.ArgumentParser(prog="autograd-lab", description="Tools for the autograd-lab course.")
    commands = parser.add_subparsers(dest="command", required=True)
    doctor = commands.add_parser("doctor", help="check that this machine is ready for the course")
    doctor.set_defaults(run=_doctor)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
