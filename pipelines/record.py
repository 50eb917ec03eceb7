"""Script form of ``offline-graph record``.

Record graph episodes from an env into Parquet episode files (CleanRL-style script).

Run from a checkout with the project installed: ``python pipelines/record.py --help``.
The job itself is :mod:`offline_graph.cli.record`.
"""

import sys

from offline_graph.cli.record import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
