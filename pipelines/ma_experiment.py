"""Script form of ``offline-graph ma-experiment``.

The multi-agent learning-quality table: BC / MARWIL on TeamEnv episodes, seeds, per module.

Run from a checkout with the project installed: ``python pipelines/ma_experiment.py --help``.
The job itself is :mod:`offline_graph.cli.ma_experiment`.
"""

import sys

from offline_graph.cli.ma_experiment import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
