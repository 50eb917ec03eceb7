"""Script form of ``offline-graph ma-experiment`` (``offline-graph experiment --task team``).

The multi-agent learning-quality table: BC / MARWIL on Team-v0 episodes, seeds, per module.

Run from a checkout with the project installed: ``python pipelines/ma_experiment.py --help``.
The job itself is :mod:`offline_graph.cli.experiment`, task :mod:`offline_graph.cli.experiments.team`.
"""

import sys

from offline_graph.cli.experiment import main

if __name__ == "__main__":
    sys.exit(main(["--task", "team", *sys.argv[1:]]))
