"""Script form of ``offline-graph inspect``.

Summarize recorded episode files: sizes, returns, and what padding every graph would cost.

Run from a checkout with the project installed: ``python pipelines/inspect_episodes.py --help``.
The job itself is :mod:`offline_graph.cli.inspect_data`.
"""

import sys

from offline_graph.cli.inspect_data import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
