"""Run the trainer from a JSON config file: `python dist_run.py cfg.json` or under torchrun."""

from __future__ import annotations

import json
import sys

from veristep.train.config import make_config
from veristep.train.gated_grpo import train

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as fh:
        train(make_config(**json.load(fh)))
