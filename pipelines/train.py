"""Script form of ``offline-graph train``.

Train BC or MARWIL on recorded graph episodes (or converted rows), then evaluate (CleanRL style).

Run from a checkout with the project installed: ``python pipelines/train.py --help``.
The job itself is :mod:`offline_graph.cli.train`.
"""

import sys

from offline_graph.cli.train import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
