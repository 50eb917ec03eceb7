"""Script form of ``offline-graph evaluate``.

Evaluate a checkpoint written by ``offline-graph train`` in the env (CleanRL style).

Run from a checkout with the project installed: ``python pipelines/evaluate.py --help``.
The job itself is :mod:`offline_graph.cli.evaluate`.
"""

import sys

from offline_graph.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
