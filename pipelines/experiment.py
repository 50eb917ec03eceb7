"""Script form of ``offline-graph experiment``.

A learning-quality table (``--task graph``, the default: BC, MARWIL and a bag-of-nodes
baseline on Graph-v0; ``team``; ``stitch``), seeds, one PNG.

Run from a checkout with the project installed: ``python pipelines/experiment.py --help``.
The job itself is :mod:`offline_graph.cli.experiment`.
"""

import sys

from offline_graph.cli.experiment import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
