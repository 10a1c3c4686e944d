"""Benchmark: the induction-head model of notebook 12 trained on several seeds, to see what varies.

Each seed trains ``course_utils.induction``'s two-layer attention-only model with the command's defaults (600 steps
of AdamW at 3e-3, batches of 64, one thread), exactly as ``python -m course_utils.induction OUT --seed S`` does, and
records, on the notebook's evaluation batch (256 sequences drawn with seed 1000):

- the loss curves and every head's previous-token and induction scores at every evaluation (every 25 steps);
- when the drop comes: the last evaluation with the second-repeat loss above 3.5 nats and the first below 0.5;
- the previous-token heads (layer-0 score above the threshold) and the induction heads (layer-1 score above it);
- the second-repeat loss with the top previous-token head ablated alone, and with every head above the threshold
  ablated together (a job shared by two heads survives the first and not the second);
- the training time, wall and CPU.

    .venv/bin/python benchmarks/induction_seeds.py                  # seeds 0-4: 2-10 minutes on 2 shared cores
    .venv/bin/python benchmarks/induction_seeds.py --seeds 0 1      # a quick look

Writes benchmarks/results/induction_seeds_cpu.json with the command, date, machine and load averages; notebook 12
prints its table and tests/test_claims_induction.py checks the notebook's sentences against it.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, machine  # noqa: E402

sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from course_utils.induction import (  # noqa: E402
    InductionConfig,
    ablate_heads,
    head_scores,
    heads_above,
    repeat_losses,
    repeated_tokens,
    train_induction,
)

EVAL_SEED = 1000  # notebook 12's evaluation batch
THRESHOLD = 0.3  # a head scoring above it does the job; a head spreading its weight evenly scores below 0.1


def drop_steps(history: list[dict]) -> tuple[int | None, int | None]:
    """The last evaluated step with the second-repeat loss above 3.5 nats, and the first below 0.5 (None: never)."""
    above = [h["step"] for h in history if h["second"] > 3.5]
    below = [h["step"] for h in history if h["second"] < 0.5]
    return (max(above) if above else None), (min(below) if below else None)


def one_seed(seed: int, steps: int) -> dict:
    config = InductionConfig()
    cpu, start = time.process_time(), time.perf_counter()
    model, history = train_induction(config, max_steps=steps, seed=seed)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    tokens = repeated_tokens(256, config.seq_len, config.vocab_size, torch.Generator().manual_seed(EVAL_SEED))
    first, second = repeat_losses(model, tokens, config.seq_len)
    prev, ind = head_scores(model, tokens, config.seq_len)  # (L, H) each
    top = int(prev[0].argmax())  # the top previous-token head of layer 0
    prev_heads = [pair for pair in heads_above(prev, THRESHOLD) if pair[0] == 0]
    ind_heads = [pair for pair in heads_above(ind, THRESHOLD) if pair[0] == 1]
    with ablate_heads(model, [(0, top)]):
        top_off = repeat_losses(model, tokens, config.seq_len)[1]
    with ablate_heads(model, prev_heads or [(0, top)]):
        set_off = repeat_losses(model, tokens, config.seq_len)[1]
    above, below = drop_steps(history)
    result = {
        "seed": seed,
        "train_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "first": first,
        "second": second,
        "prev": prev.tolist(),
        "ind": ind.tolist(),
        "top_prev_head": [0, top],
        "prev_heads": prev_heads,
        "ind_heads": ind_heads,
        "second_top_prev_off": top_off,
        "second_prev_set_off": set_off,
        "last_step_above_3.5": above,
        "first_step_below_0.5": below,
        "history": history,
    }
    print(
        f"seed {seed}: {wall:.1f} s; second repeat {second:.2f}; previous-token heads {prev_heads}; "
        f"drop {above}->{below}; top head off {top_off:.2f}, all above {THRESHOLD} off {set_off:.2f}",
        flush=True,
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--out", type=Path, default=RESULTS / "induction_seeds_cpu.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread, as the checkpoint's command
    before = machine()
    runs = [one_seed(seed, args.steps) for seed in args.seeds]
    after = machine()
    meta = {
        "command": shlex.join([".venv/bin/python", "benchmarks/induction_seeds.py", *sys.argv[1:]]),
        "date": before["date"],
        "machine": {**{k: before[k] for k in ("host", "cpus", "torch", "python")}, "arch": platform.machine()},
        "load_average_before": before["load_average_1_5_15"],
        "load_average_after": after["load_average_1_5_15"],
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "threshold": THRESHOLD,
        "eval_seed": EVAL_SEED,
        "config": InductionConfig().__dict__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
