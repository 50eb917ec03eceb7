"""Script form of ``offline-graph stitch-experiment``.

The stitching table: BC / MARWIL / IQL / CQL on the same Stitch-v0 logs, seeds, and the expert control.

Run from a checkout with the project installed: ``python pipelines/stitch_experiment.py --help``.
The job itself is :mod:`offline_graph.cli.stitch_experiment`.
"""

import sys

from offline_graph.cli.stitch_experiment import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
