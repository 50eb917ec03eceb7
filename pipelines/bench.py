"""Script form of ``offline-graph bench``.

``offline-graph bench``: ours vs RLlib's stock (padded) path on the same synthetic data.

Run from a checkout with the project installed: ``python pipelines/bench.py --help``.
The job itself is :mod:`offline_graph.cli.bench`.
"""

import sys

from offline_graph.cli.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
