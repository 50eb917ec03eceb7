"""Script form of ``offline-graph migrate``.

``offline-graph migrate``: padded RLlib ``Repeated`` recordings -> ragged episode files.

Run from a checkout with the project installed: ``python pipelines/migrate.py --help``.
The job itself is :mod:`offline_graph.cli.migrate`.
"""

import sys

from offline_graph.cli.migrate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
