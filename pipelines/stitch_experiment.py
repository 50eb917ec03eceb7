"""Script form of ``offline-graph stitch-experiment`` (``offline-graph experiment --task stitch``).

The stitching table: BC / MARWIL / IQL / CQL on Stitch-v0 logs, seeds, expert control.

Run from a checkout with the project installed: ``python pipelines/stitch_experiment.py --help``.
The job itself is :mod:`offline_graph.cli.experiment`, task :mod:`offline_graph.cli.experiments.stitch`.
"""

import sys

from offline_graph.cli.experiment import main

if __name__ == "__main__":
    sys.exit(main(["--task", "stitch", *sys.argv[1:]]))
