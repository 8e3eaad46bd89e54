"""Comparing sharded with unsharded training: what the recommendation says when two trials
cannot be told apart, and the sharding setting's checks before anything starts."""

from tracetui.analysis import recommendation
from tracetui.cli import main


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
