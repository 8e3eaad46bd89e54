"""Comparing sharded with unsharded training: what the recommendation says when two trials
cannot be told apart, and the sharding setting's checks before anything starts."""

import pytest

from tracetui.analysis import recommendation
from tracetui.cli.main import main


def _row(trial, median, lo, hi, **kw):
    return dict(machine="H200", effective_batch=16, trial=trial, status="ok", step_ms_median=median,
                step_ms_ci_low=lo, step_ms_ci_high=hi, **kw)


def test_recommendation_names_the_trials_it_cannot_tell_apart():
    rows = [_row("8x1x2 shard=fsdp", 940.6, 925, 954), _row("8x1x2 shard=ddp", 950.5, 943, 952),
            _row("4x2x2 shard=ddp", 1024.1, 1019, 1033)]
    rec = recommendation(rows)
    assert rec.startswith("use 8x1x2 shard=fsdp for effective batch 16 "
                          "(8x1x2 shard=ddp is as fast within the intervals)")
    assert "4x2x2" not in rec  # clear of the best: not a tie
    # no intervals (too few steps): no claim of a tie either
    bare = [dict(r, step_ms_ci_low=None, step_ms_ci_high=None) for r in rows]
    assert "within the intervals" not in recommendation(bare)


def test_fsdp_needs_more_than_one_process(capsys):
    assert main(["--export", "csv", "--vary", "sharding=ddp,fsdp"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("tracetui: error: --vary: fsdp shards the model over several processes, but this sweep "
                   "runs one; add --nproc-per-node 2 (or more)")
    assert main(["--export", "csv", "--sharding", "zero3", "--nproc-per-node", "2"]) == 2
    assert "--sharding: 'zero3' is not one of ddp, fsdp" in capsys.readouterr().err


def test_monitor_shows_per_rank_memory_and_traffic_of_an_h200_fsdp_trial():
    """The monitor on the real two-H200 log (DDP against FSDP, qwen3-8b): the selected FSDP
    trial's detail names each rank's peak, why there is no exposed-communication time, and what
    each rank sent per step; the DDP trial's gives its exposed all-reduce."""
    import asyncio
    import gzip
    import re
    from pathlib import Path

    from tracetui.events.schema import parse_line
    from tracetui.tui.app import TraceApp
    from tracetui.tui.sources import ReplaySource
    from tracetui.tui.widgets import DetailPane, RunList

    log = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200x2_fsdp" / "fsdp_events.jsonl.gz"
    with gzip.open(log, "rt", encoding="utf-8") as fh:
        events = [e for e, _ in map(parse_line, fh) if e is not None]
    app = TraceApp(ReplaySource(events))

    async def go():
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            app.query_one(RunList).focus()
            seen = {}
            for _ in range(8):  # from the last run (8x1x2 fsdp) up to the first
                text = app.query_one(DetailPane).content(110).plain
                seen[text.split(" on ", 1)[0]] = text
                await pilot.press("up")
                await pilot.pause()
            await pilot.press("q")
            return seen

    seen = asyncio.run(go())
    fsdp, ddp = seen["1x8x2 shard=fsdp"], seen["1x8x2 shard=ddp"]
    assert "per rank (GiB): 18.50 / 18.50" in fsdp and "per rank (GiB): 25.23 / 25.23" in ddp
    assert "exposed time not separable (FSDP communicates in every micro-batch)" in fsdp
    sent = {name: int(re.search(r"sends (\d+) MiB per step per rank: all-gather of every weight", text).group(1))
            for name, text in seen.items() if "shard=fsdp" in name}
    # FSDP's traffic grows with the accumulation steps: 8 micro-batches send 8x what one does
    assert sent["1x8x2 shard=fsdp"] == pytest.approx(8 * sent["8x1x2 shard=fsdp"], rel=0.001)
    assert sent["8x1x2 shard=fsdp"] == pytest.approx(15.5 * 1024, rel=0.01)  # about the 16 GB of bf16 weights
    assert "all-reduce exposed 33.8 ms per step" in ddp
    # DDP sends the LoRA gradients (about 0.16 GiB) once per step, whatever the split
    ddp_sent = {re.search(r"sends (\d+) MiB per step per rank: all-reduce of the LoRA gradients", text).group(1)
                for name, text in seen.items() if "shard=ddp" in name}
    assert len(ddp_sent) == 1 and 150 <= int(ddp_sent.pop()) <= 180
    assert "fsdp2 (39 units)" in fsdp


def test_emitted_config_of_a_sharded_recommendation(tmp_path):
    """--emit-config from the real two-H200 log of the memory-limit sweep, where only the FSDP
    trial fitted: the file shards as measured and says how to launch it."""
    import gzip
    from pathlib import Path

    import yaml

    from tracetui.analysis import Results, summarise
    from tracetui.core.config import SweepConfig
    from tracetui.outputs.emit import write_trl_config
    from tracetui.events.schema import parse_line

    log = Path(__file__).resolve().parent.parent / "docs" / "results" / "h200x2_fsdp" / "fit_events.jsonl.gz"
    with gzip.open(log, "rt", encoding="utf-8") as fh:
        events = [e for e, _ in map(parse_line, fh) if e is not None]
    rows = summarise(Results().extend(events))
    assert {r["trial"]: r["status"] for r in rows} == {"8x1x2 shard=ddp": "oom", "8x1x2 shard=fsdp": "ok"}
    best = next(r for r in rows if r["status"] == "ok")
    out = tmp_path / "best.yaml"
    write_trl_config(str(out), best, SweepConfig(model="qwen3-8b", nproc_per_node=2, seq_len=1024))
    text = out.read_text()
    data = yaml.safe_load(text)
    assert (data["per_device_train_batch_size"], data["gradient_accumulation_steps"]) == (8, 1)
    assert data["fsdp"] == "full_shard auto_wrap" and data["fsdp_config"]["version"] == 2
    assert "# measured over 2 processes: launch with torchrun --nproc-per-node 2" in text
