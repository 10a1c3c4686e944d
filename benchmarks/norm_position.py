"""Benchmark: pre-norm against post-norm in the course's GPT, with and without learning-rate warm-up.

Post-norm (LayerNorm after each residual add, the original Transformer) and pre-norm (LayerNorm before each
sublayer, GPT-2 onwards) trained at the same budget by the course's own loop (``course_utils.train.train``):
a 6-layer, 48-wide GPT (context 32, batch 16, rotary positions) for 150 steps at a peak learning rate of
1e-2, with no warm-up and with a linear warm-up over the first half of the steps, several seeds each.
Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture", predict that post-norm needs
the warm-up and pre-norm does not.

    .venv/bin/python benchmarks/norm_position.py                       # 3 seeds, about 5 minutes on 2 cores
    .venv/bin/python benchmarks/norm_position.py --seeds 1 --steps 60  # a quick look

Writes benchmarks/results/norm_position_cpu.json (notebook 11's Appendix A plots its curves, tests/test_claims_gpt.py
checks the notebook's sentences against it): the command, date, device, torch version and the load average
before and after, then for every run its training loss at every step and its validation loss (the mean over
every position of the validation split). Losses do not depend on the machine's load; the times do.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, ROOT, TINY_SHAKESPEARE, machine  # noqa: E402

sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from course_utils.data import CharTokenizer, load_text, sha256_file, split_data  # noqa: E402
from course_utils.gpt import GPTConfig  # noqa: E402
from course_utils.runs import unigram_loss  # noqa: E402
from course_utils.train import TrainConfig, train  # noqa: E402

MODEL = dict(context_length=32, embed_dim=48, num_heads=4, num_layers=6, positions="rope", dropout=0.0)


def one_run(data: Path, norm: str, warmup: int, seed: int, steps: int, lr: float, batch_size: int) -> dict:
    """Train one model with ``course_utils.train.train`` in a scratch folder; return its curve and figures."""
    config = GPTConfig(**MODEL, norm_position=norm)
    settings = TrainConfig(
        batch_size=batch_size,
        max_steps=steps,
        learning_rate=lr,
        min_lr=lr / 10,
        warmup_steps=warmup,
        eval_interval=steps,
        eval_batches=4,
        log_interval=10,
        checkpoint_interval=steps,
        seed=seed,
    )
    with tempfile.TemporaryDirectory(prefix="norm_position-") as out:
        start = time.perf_counter()
        result = train(config, data, out, settings, device="cpu", progress=False)
        wall = time.perf_counter() - start
    return {
        "norm_position": norm,
        "warmup_steps": warmup,
        "seed": seed,
        "val_loss": result["val_loss"],
        "train_loss": result["train_loss"],
        "params": result["params"],
        "train_s": result["train_s"],
        "wall_s": wall,
        "history": [round(x, 4) for x in result["history"]],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=TINY_SHAKESPEARE)
    p.add_argument("--seeds", type=int, default=3, help="seeds 1..N for every condition")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--learning-rate", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps of the warm-up runs (default: half)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="1 by default: the machine is shared")
    p.add_argument("--out", type=Path, default=RESULTS / "norm_position_cpu.json")
    args = p.parse_args()
    if not args.data.exists():
        sys.exit(f"no data at {args.data}: pass --data PATH to a text file (tiny Shakespeare, 1,115,394 characters)")
    warmup = args.steps // 2 if args.warmup is None else args.warmup
    text = load_text(args.data)
    tokenizer = CharTokenizer.from_text(text)
    train_ids, val_ids = split_data(tokenizer.encode(text))
    unigram = unigram_loss(train_ids, val_ids, tokenizer.vocab_size)  # what guessing by frequency scores
    torch.set_num_threads(args.threads)
    before = machine()
    start = time.perf_counter()
    runs = []
    for seed in range(1, args.seeds + 1):
        for w in (0, warmup):
            for norm in ("pre", "post"):
                r = one_run(args.data, norm, w, seed, args.steps, args.learning_rate, args.batch_size)
                runs.append(r)
                print(
                    f"{norm:>4}-norm  warm-up {w:3d}  seed {seed}:  val_loss {r['val_loss']:.3f}  "
                    f"last 10 steps {sum(r['history'][-10:]) / 10:.3f}  ({r['wall_s']:.0f} s)",
                    flush=True,
                )
    after = machine()
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/norm_position.py", *sys.argv[1:]])
    record = {
        "meta": {
            "benchmark": "norm_position",
            "command": command,
            "device": f"cpu, {args.threads} thread(s)",
            "date": after["date"],
            "torch": after["torch"],
            "python": after["python"],
            "cpus": after["cpus"],
            "load_average_1_5_15": {"before": before["load_average_1_5_15"], "after": after["load_average_1_5_15"]},
            "total_wall_s": round(time.perf_counter() - start, 1),
            "data": {"file": args.data.name, "sha256": sha256_file(args.data), "characters": len(text)},
            "unigram_val_loss": unigram,
            "model": MODEL,
            "steps": args.steps,
            "batch_size": args.batch_size,
            "learning_rate": args.learning_rate,
            "min_lr": args.learning_rate / 10,
            "warmup_steps": [0, warmup],
            "seeds": list(range(1, args.seeds + 1)),
            "trainer": "course_utils.train.train (AdamW, weight decay 0.1, gradient clipping at 1, cosine decay)",
            "val_loss": "mean over every position of the validation split (last 10% of the text)",
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"\nvalidation loss after {args.steps} steps (mean over seeds, [min, max]); the unigram model scores "
        f"{unigram:.3f}:"
    )
    for w in (0, warmup):
        for norm in ("pre", "post"):
            v = [r["val_loss"] for r in runs if r["norm_position"] == norm and r["warmup_steps"] == w]
            print(f"  {norm:>4}-norm, warm-up {w:3d}: {sum(v) / len(v):.3f}  [{min(v):.3f}, {max(v):.3f}]")
    print(
        f"{record['meta']['date']}  {record['meta']['device']}  torch {after['torch']}  load average before "
        f"{before['load_average_1_5_15']}, after {after['load_average_1_5_15']}  ({record['meta']['total_wall_s']} s)"
    )
    print(f"results: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
