"""Script form of ``offline-graph convert``.

``offline-graph convert``: recorded episodes -> transition rows, every transition once.

Run from a checkout with the project installed: ``python pipelines/convert.py --help``.
The job itself is :mod:`offline_graph.cli.convert`.
"""

import sys

from offline_graph.cli.convert import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
