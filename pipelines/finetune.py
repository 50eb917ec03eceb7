"""Script form of ``offline-graph finetune``.

Fine-tune a checkpoint of ``offline-graph train`` online with PPO in the env (CleanRL style).

Run from a checkout with the project installed: ``python pipelines/finetune.py --help``.
The job itself is :mod:`offline_graph.cli.finetune`.
"""

import sys

from offline_graph.cli.finetune import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
