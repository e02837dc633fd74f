"""Run logging: one JSONL line of metrics per step (always), TensorBoard (optional), a console
line and a progress bar. Only the main process writes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

#: Every metric name a step line can carry; each line carries all of them, `null` where a metric
#: was not measured at that step (documented in docs/trainer.md, `## Metrics`). Each is measured
#: over every process's groups, so it does not depend on the number of processes.
STEP_METRICS: tuple[str, ...] = (
    # the gate and the PRM
    "gate/acr", "gate/all_wrong_rate", "gate/all_correct_rate", "gate/gated_groups",
    "gate/prm_completions", "gate/steps_per_gated_response", "gate/prm_flat_groups", "gate/mc_rollouts",
    "prm/nan_steps",
    # the implicit PRM's online update (`--prm implicit:DIR`; null with any other scorer)
    "prm/update_s", "prm/update_forward_s", "prm/update_backward_s", "prm/update_loss", "prm/update_seqs",
    # the credit diagnostic (oracle step labels, built-in task)
    "gate/first_error_blamed", "gate/first_error_responses", "credit/adv_on_track",
    "credit/adv_first_error", "credit/adv_after_error", "credit/adv_answer",
    # advantages and rewards
    "adv/nonzero_frac", "adv/abs_mean", "reward/mean", "reward/std", "reward/correct_frac",
    "reward/unjudged_frac",
    # the update
    "loss/policy", "loss/kl", "loss/clip_frac_low", "loss/clip_frac_high", "loss/ratio_dev",
    "policy/entropy", "rollout/logprob_mismatch", "train/grad_norm", "train/updates",
    "train/skipped_updates", "train/lr", "train/rollouts_total",
    # the batch
    "completion/len_mean", "completion/truncated_frac", "difficulty/easy", "difficulty/frontier",
    "difficulty/hard", "dapo/rounds", "dapo/extra_rollouts", "dapo/kept_informative",
    # held-out evaluation (eval/pass@G: deprecated name of eval/pass@k)
    "eval/pass@1", "eval/pass@1_se", "eval/pass@k", "eval/k", "eval/pass@G", "eval/greedy",
    "eval/greedy_se", "eval/unjudged_frac",
    # time (the slowest process's)
    "time/rollout_s", "time/reward_s", "time/prm_s", "time/train_s", "time/eval_s", "time/step_s",
    "throughput/tokens_per_s",
)

_CONSOLE_KEYS = ("reward/mean", "gate/acr", "gate/gated_groups", "adv/nonzero_frac", "loss/policy",
                 "eval/pass@1", "eval/greedy", "throughput/tokens_per_s")


def _clean(value: Any) -> Any:
    """JSON-safe value: floats stay floats, non-finite become null, tensors become numbers."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    """Writes `metrics.jsonl` under the output folder, plus optional TensorBoard and console."""

    def __init__(self, output_dir: str | Path, enabled: bool = True, tensorboard: bool = False,
                 progress: bool = True, total_steps: int = 0, start_step: int = 0,
                 log_every: int = 1) -> None:
        self.enabled = enabled
        self.path = Path(output_dir) / "metrics.jsonl"
        self.log_every = max(1, log_every)
        self._tb = None
        self._bar = None
        if not enabled:
            return
        writer = None
        if tensorboard:  # before any file is opened, so a missing package leaves nothing open
            try:
                from torch.utils.tensorboard import SummaryWriter as writer
            except ImportError as err:
                raise ValueError("tensorboard=True needs the `tensorboard` package "
                                 "(pip install tensorboard)") from err
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step)
        self._fh = open(self.path, "a", encoding="utf-8")
        if writer is not None:
            self._tb = writer(str(Path(output_dir) / "tensorboard"), purge_step=start_step + 1)
        if progress:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=start_step, desc="train", unit="step",
                             dynamic_ncols=True, file=sys.stderr, leave=True)

    def _truncate_after(self, step: int) -> None:
        """Drop lines of steps after `step`: a resumed run rewrites them instead of duplicating."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue  # a torn last line from a killed run
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
        tmp.replace(self.path)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write one step's metrics (JSONL line, TensorBoard scalars, console line, bar)."""
        if not self.enabled:
            return
        record = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()
        if self._tb is not None:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self._tb.add_scalar(key, value, step)
        if self._bar is not None:
            self._bar.update(1)
        if step % self.log_every == 0:
            self.console(f"step {step:>5} " + format_metrics(record, _CONSOLE_KEYS))

    def console(self, line: str) -> None:
        """Print a line without breaking the progress bar."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Flush and close every sink (again: nothing)."""
        if not self.enabled or self._fh.closed:
            return
        self._fh.close()
        if self._tb is not None:
            self._tb.close()
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def format_metrics(record: dict[str, Any], keys: tuple[str, ...]) -> str:
    """`name value` pairs of the keys present, compactly."""
    parts = []
    for key in keys:
        value = record.get(key)
        if value is None:
            continue
        short = key.split("/")[-1]
        parts.append(f"{short} {value:.3g}" if isinstance(value, float) else f"{short} {value}")
    return " | ".join(parts)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Read a metrics.jsonl back as a list of dicts."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
