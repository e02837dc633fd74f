"""Prompt data: local JSONL/Parquet files, any `datasets` source, or the built-in arithmetic task.

Each record becomes a `Problem`: the raw record (for the verifiers' `reference_from_record`),
the problem text (for the PRM) and the model input (prompt template or chat template applied).
`PromptSampler` walks the problems in a seeded order, one reshuffle per epoch, and its position
is part of a checkpoint.

Loading follows the error contract of every `veristep` command: a line or record that cannot
be used is named in one `FILE:LINE: what` warning on stderr and skipped, every other one is
kept; a missing file is one clear `UsageError` (exit code 2 of `veristep train`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from veristep.common.jsonl_io import InputError, LineMessages, UsageError, iter_jsonl

_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")

BUILTIN_PREFIX = "builtin:"


@dataclass
class Problem:
    """One prompt with its reference data."""

    index: int  # position in the loaded list, stable across runs (the prompt id of the difficulty tracker)
    text: str  # the problem as written in the record (what the PRM sees)
    model_input: str  # the text the policy is conditioned on
    record: dict[str, Any]


def parse_builtin(source: str) -> tuple[str, dict[str, Any]]:
    """Split `builtin:name:key=value,...` into the name and typed keyword arguments."""
    body = source[len(BUILTIN_PREFIX):]
    name, _, opts = body.partition(":")
    kwargs: dict[str, Any] = {}
    for item in filter(None, (o.strip() for o in opts.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"dataset={source!r}: option {item!r} is not key=value")
        kwargs[key.strip()] = _typed(value.strip())
    return name, kwargs


def _typed(value: str) -> Any:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value.lower(), value)


def check_data_files(*sources: str | None) -> None:
    """Raise UsageError for a data file name that does not exist (checked before any model loads)."""
    for source in sources:
        if not source or source.startswith(BUILTIN_PREFIX):
            continue
        path = Path(source)
        if path.suffix in _DATA_SUFFIXES and not path.exists():  # a file name, never a hub name
            raise UsageError(f"dataset={source}: no such data file")


def load_records(source: str, *, split: str = "train", config_name: str | None = None,
                 limit: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    """Read records from a builtin task, a JSONL/JSON/Parquet file or a `datasets` source."""
    if source.startswith(BUILTIN_PREFIX):
        name, kwargs = parse_builtin(source)
        if name != "arith":
            raise ValueError(f"dataset={source!r}: the only built-in task is builtin:arith")
        from veristep.train.demo import task

        # The "rl" part of the problem space: never a prompt the warm start was taught.
        return [dict(r) for r in task.make_problems(limit or 2000, seed=seed, part="rl", **kwargs)]
    check_data_files(source)
    path = Path(source)
    if path.suffix in (".jsonl", ".json") and path.exists():
        records = _read_json_records(path)
    elif path.suffix == ".parquet" and path.exists():
        import datasets

        records = [dict(r) for r in datasets.load_dataset("parquet", data_files=str(path), split="train")]
    else:
        import datasets

        if path.exists() and path.is_dir():
            ds = datasets.load_from_disk(str(path)) if (path / "dataset_info.json").exists() else \
                datasets.load_dataset(str(path), config_name, split=split)
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[split]
        else:
            ds = datasets.load_dataset(source, config_name, split=split)
        records = [dict(r) for r in ds]
    return records[:limit] if limit else records


def _messages() -> LineMessages:
    # Every rank loads the data; one of them is enough to read the warnings.
    return LineMessages("veristep train", quiet=int(os.environ.get("RANK", "0")) != 0)


def _read_json_records(path: Path) -> list[dict[str, Any]]:
    messages = _messages()
    records = []
    if path.suffix == ".json" and path.read_text(encoding="utf-8").lstrip().startswith("["):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise InputError(path, err.lineno, f"bad JSON ({err.msg})") from None
        for k, row in enumerate(rows):
            if isinstance(row, dict):
                records.append(dict(row))
            else:
                messages.add(path, None, f"record {k}: not a JSON object; skipped")
    else:
        for record in iter_jsonl(path):
            if record.error is not None:
                messages.add(path, record.line_no, f"{record.error}; line skipped")
            else:
                records.append(record.data)
    messages.finish()
    return records


def format_prompt(record: dict[str, Any], prompt_field: str, template: str,
                  tokenizer: Any | None = None, chat: bool = False) -> tuple[str, str]:
    """Return (problem text, model input) for one record."""
    if prompt_field not in record:
        raise KeyError(prompt_field)
    text = str(record[prompt_field])
    fields = {k: v for k, v in record.items() if isinstance(k, str)}
    fields["prompt"] = text
    body = template.format(**fields)
    if chat:
        messages = [{"role": "user", "content": body}]
        body = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text, body


def build_problems(records: list[dict[str, Any]], cfg: Any, tokenizer: Any,
                   source: str = "dataset") -> list[Problem]:
    """Turn records into Problems; a record the prompt cannot be built from is warned about
    and skipped, and a dataset with no usable record is an error naming the field."""
    problems = []
    messages = _messages()
    first_error = ""
    for i, record in enumerate(records):
        record = dict(record)
        if cfg.answer_field != "answer" and cfg.answer_field in record:
            record["answer"] = record[cfg.answer_field]
        try:
            text, model_input = format_prompt(record, cfg.prompt_field, cfg.prompt_template,
                                              tokenizer, cfg.chat_template)
        except (KeyError, IndexError, ValueError) as err:
            why = f"no field {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
            first_error = first_error or f"record {i + 1} has {why}; it has {sorted(record)}"
            messages.add(source, None, f"record {i + 1}: {why} (prompt_field/prompt_template); skipped")
            continue
        problems.append(Problem(len(problems), text, model_input, record))
    messages.finish()
    if records and not problems:
        raise ValueError(f"prompt_field/prompt_template: no record of {source} can be used: "
                         f"{first_error}")
    return problems


def load_train_and_eval(cfg: Any, tokenizer: Any) -> tuple[list[Problem], list[Problem]]:
    """Load the training problems and the held-out evaluation problems of a config."""
    # Generated data uses a fixed seed: every run seed trains on the same prompts, in its own order.
    train_records = load_records(cfg.dataset, split=cfg.dataset_split, config_name=cfg.dataset_config,
                                 limit=cfg.train_size, seed=0)
    if cfg.eval_dataset:
        eval_records = load_records(cfg.eval_dataset, split=cfg.eval_split,
                                    config_name=cfg.dataset_config, limit=cfg.eval_size, seed=1)
    elif cfg.dataset.startswith(BUILTIN_PREFIX) and cfg.eval_size:
        # A disjoint held-out set: a different generator seed, minus any prompt seen in training.
        seen = {r["prompt"] for r in train_records}
        candidates = load_records(cfg.dataset, limit=cfg.eval_size * 20 + 100, seed=1_000_003)
        fresh = {r["prompt"]: r for r in candidates if r["prompt"] not in seen}  # each prompt once
        eval_records = list(fresh.values())[: cfg.eval_size]
        if len(eval_records) < cfg.eval_size:
            raise ValueError(f"eval_size={cfg.eval_size}: {cfg.dataset} has only {len(eval_records)} "
                             "prompts left outside the training set; lower eval_size or train_size")
    else:
        eval_records = []
    return (build_problems(train_records, cfg, tokenizer, cfg.dataset),
            build_problems(eval_records, cfg, tokenizer, cfg.eval_dataset or cfg.dataset))


class PromptSampler:
    """Seeded epoch-wise shuffling over problem indices; resumable through its state dict."""

    def __init__(self, num_items: int, seed: int) -> None:
        if num_items < 1:
            raise ValueError("dataset: no prompts were loaded")
        self.num_items = num_items
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._shuffle(0)

    def _shuffle(self, epoch: int) -> list[int]:
        gen = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.num_items, generator=gen).tolist()

    def next_indices(self, n: int) -> list[int]:
        """The next `n` problem indices, reshuffling at each epoch boundary."""
        out = []
        while len(out) < n:
            if self.position >= self.num_items:
                self.epoch += 1
                self.position = 0
                self._order = self._shuffle(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, int]:
        """Position in the stream."""
        return {"epoch": self.epoch, "position": self.position, "num_items": self.num_items, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the position saved by `state_dict`."""
        if state["num_items"] != self.num_items:
            raise ValueError(f"resume: the checkpoint saw {state['num_items']} prompts, the dataset "
                             f"now has {self.num_items}")
        self.seed = state["seed"]
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._order = self._shuffle(self.epoch)
