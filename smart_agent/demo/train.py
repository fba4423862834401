"""The demo's stand-in for a training job: writes epoch lines to the pipeline log, then exits.

Run as `python train.py --nproc_per_node N --epochs E --log FILE`; its command line is what
the agent's process watch recognises as a job starting.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc_per_node", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--epoch-s", type=float, default=2.5)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    with open(args.log, "a", buffering=1) as log:
        log.write(f"***** Running training ***** nproc_per_node={args.nproc_per_node}\n")
        for epoch in range(1, args.epochs + 1):
            time.sleep(args.epoch_s)
            log.write(f"Epoch {epoch}/{args.epochs}: loss={1.0 / epoch:.3f}\n")
        log.write("training finished\n")


if __name__ == "__main__":
    main()
