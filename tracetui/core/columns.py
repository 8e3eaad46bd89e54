"""The summary's columns, declared once: the CSV, the JSON and the monitor's table are all drawn
from :data:`COLUMNS`, so a column cannot be written under one name and read under another: the
summary's rows (:class:`tracetui.analysis.Row`) refuse any key not declared here, read or
written, and :func:`check_rows` checks rows built elsewhere.

A column is either a value of the summary row (``key``: its CSV/JSON name) or, for the monitor
only, a cell composed from several values (``csv=False``: the p10-p90 spread, the speedup with
its interval).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple


from .knobs import KNOBS
from .phases import BETWEEN, PHASES

#: the read-back settings (:mod:`tracetui.probe.settings` reads them from the trainer) shown as
#: columns (CSV/JSON) and in the monitor's header, in order
SETTING_COLUMNS = (
    "activation_checkpointing", "precision_used", "attn_implementation", "optimizer", "loss_type",
    "dataloader_num_workers", "dataloader_pin_memory", "torch_compile", "use_liger_kernel", "padding_free",
    "lora_targets_resolved", "lora_dropout_used", "sharding_used", "ddp_find_unused_parameters", "comm_gib_per_step",
    "versions",
)


class Cell(NamedTuple):
    """A cell with a style (a Rich style name, e.g. ``bold green``) for the monitor to draw; its
    ``str`` is its text. Kept as plain data, so that the column registry needs no drawing library."""

    text: str
    style: str = ""

    def __str__(self) -> str:
        return self.text


def fmt(v: Any, spec: str = ".1f", dash: str = "-") -> str:
    return dash if v is None else format(v, spec)


def fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h} h {m:02d} min"
    if m:
        return f"{m} min {s:02d} s"
    return f"{s} s"


def fmt_gib(x: float) -> str:
    """A memory size as people write it: 140, 80, 24, 4.25."""
    return f"{x:.0f}" if x >= 20 or float(x).is_integer() else f"{x:.3g}"


STATUS_STYLE = {
    "queued": "dim", "warming up": "yellow", "running": "bold cyan", "ok": "bold green",
    "oom": "bold red", "error": "bold red", "crashed": "bold red", "interrupted": "yellow",
    "stalled": "bold red", "unavailable": "yellow", "skipped": "dim", "crowded": "yellow", "lost": "yellow",
}


@dataclass(frozen=True)
class Column:
    """One column. ``key``: the summary row's field (and the CSV/JSON name). ``header``: the
    monitor's heading, None for a column the monitor leaves out. ``cell``: how the monitor shows
    it (default: ``spec`` applied to the value). ``csv``: whether the CSV and JSON carry it."""

    key: str
    header: str | None = None
    spec: str = ".1f"
    cell: Callable[[dict, dict], Any] | None = None
    csv: bool = True
    unit: str = ""
    help: str = ""

    def show(self, row: dict, ctx: dict) -> Any:
        if self.cell is not None:
            return self.cell(row, ctx)
        return fmt(row.get(self.key), self.spec)


def _bold(row: dict) -> str:
    return "bold green" if row.get("fastest") else ""


def _split(row: dict, ctx: dict) -> Cell:
    name = row.get("trial") or row["split"]
    if ctx.get("multi_eb"):
        name = f"{name} (eb {row['effective_batch']})"
    if ctx.get("multi_machine"):
        name = f"{row['machine']} {name}"
    return Cell(name, style=_bold(row))


def _status(row: dict, ctx: dict) -> Cell:
    status = row["status"]
    if status != "ok" and row.get("message"):
        status = f"{status}: {row['message'][:60]}"
    elif row.get("busy"):
        status = f"{status} (busy)"
    return Cell(status, style=STATUS_STYLE.get(row["status"], ""))


def _step(row: dict, ctx: dict) -> Cell:
    return Cell(fmt(row.get("step_ms_median")), style=_bold(row))


def _spread(row: dict, ctx: dict) -> str:
    return f"{fmt(row.get('step_ms_p10'), '.0f')}-{fmt(row.get('step_ms_p90'), '.0f')}"


def _speedup(row: dict, ctx: dict) -> Cell:
    sp = row.get("speedup_vs_slowest")
    speed = "-" if sp is None else f"{sp:.2f}x"
    if sp is not None and row.get("speedup_ci_low") is not None and row["speedup_ci_low"] != row["speedup_ci_high"]:
        speed += f" [{row['speedup_ci_low']:.2f}-{row['speedup_ci_high']:.2f}]"
    return Cell(speed, style=_bold(row))


def _comparison(row: dict, ctx: dict) -> str:
    text = row.get("comparison")
    if not text:
        return "-"
    return f"paired {row['paired_steps']}" if row.get("paired_steps") else "unpaired"


def _mfu(row: dict, ctx: dict) -> str:
    v = row.get("mfu_pct")
    return "-" if v is None else f"{v:.1f}%" if v < 10 else f"{v:.0f}%"


def _loss(row: dict, ctx: dict) -> str:
    return fmt(row.get("final_loss"), ".4f") + (" drift!" if row.get("loss_ok") is False else "")


def _steps(row: dict, ctx: dict) -> str:
    why = row.get("stop_reason") or ("trainer stop" if row.get("trainer_stop") else "early")
    return str(row.get("steps_measured", 0)) + (f" ({why})" if row.get("stopped_early") else "")


def _runs(row: dict, ctx: dict) -> str:
    spread = row.get("repeat_spread_pct")
    return str(row.get("runs", 1)) + (f" ±{spread / 2:.1f}%" if spread is not None else "")


def bound_text(row: dict, ctx: dict | None = None) -> str:
    """The bound label with its evidence (``host-bound: GPU busy 16%``)."""
    return f"{row.get('bound') or '-'}" + (f": {row['evidence']}" if row.get("evidence") and row.get("bound") else "")


def _projected(row: dict, ctx: dict) -> str:
    return fmt_duration(row["projected_s"]) if row.get("projected_s") else "-"


def _ranks(row: dict, ctx: dict) -> Cell:
    """Data-parallel ranks; a straggler (compute >10% behind the fastest rank) in red."""
    if not row.get("ranks"):
        return Cell("-")
    spread = row.get("rank_spread_pct")
    if spread is None:
        return Cell(str(row["ranks"]))
    text = f"{row['ranks']} (r{row['slowest_rank']} +{spread:.0f}%)"
    return Cell(text, style="bold red" if spread > 10 else "")


def _ckpt(row: dict, ctx: dict) -> str:
    v = row.get("activation_checkpointing")
    return "-" if v is None else "on" if v else "off"


COLUMNS: tuple[Column, ...] = (
    Column("machine", help="GPU model (or CPU) the runs used"),
    Column("nodes", help="the Ray nodes the runs ran on (--ray; empty: this machine)"),
    Column("effective_batch"), Column("micro_batch"), Column("grad_accum"), Column("world_size"),
    Column("split", "split", cell=_split),
    Column("trial", help="the split and the values of the settings varied (--vary)"),
    Column("status", "status", cell=_status),
    Column("step_ms_median", "step ms", cell=_step, unit="ms",
           help="median step (of a typical run when there are several)"),
    Column("spread", "p10-p90", cell=_spread, csv=False),
    Column("step_ms_p10", unit="ms"), Column("step_ms_p90", unit="ms"),
    Column("step_ms_ci_low", unit="ms"), Column("step_ms_ci_high", unit="ms"),
    *(Column(p.field, p.short, unit="ms", help=f"{p.help}: its share of the median step") for p in PHASES),
    Column("tokens_per_s", "tok/s", spec=".0f"), Column("samples_per_s"),
    Column("speedup", "speedup", cell=_speedup, csv=False),
    Column("speedup_vs_slowest"), Column("speedup_ci_low"), Column("speedup_ci_high"),
    Column("comparison", "vs slowest", cell=_comparison,
           help="how the speedup was judged: paired over N steps (the two splits' steps trained on the same "
                "rows: compared step by step) or unpaired, and why"),
    Column("paired_steps", help="steps compared one by one against the slowest split (paired comparison)"),
    Column("gpu_util_mean", "GPU%", spec=".0f", unit="%"),
    Column("mfu_pct", "MFU", cell=_mfu, unit="%",
           help="model FLOPs per second over the GPU's dense peak for the precision that ran (tracetui.core.flops)"),
    Column("tflops", "TFLOP/s", spec=".1f", help="model FLOPs per second at the median step, in TFLOP/s"),
    Column("tflop_per_step", spec=".4g", help="model FLOPs of one optimizer step (median), TFLOP: forward and "
                                              "backward for the tokens processed, padding included"),
    Column("hw_tflop_per_step", spec=".4g", help="hardware FLOPs of one optimizer step, TFLOP: model FLOPs and "
                                                 "activation checkpointing's recomputation"),
    Column("peak_tflops", help="the dense peak MFU is measured against, TFLOP/s (--peak-tflops sets it)"),
    Column("padding_pct", unit="%", help="share of the positions processed that were padding (counted as work)"),
    Column("mfu_note", help="the peak used and its precision, the padding; or why there is no MFU"),
    Column("peak_mem_gib", "peak GiB", spec=".2f", unit="GiB"), Column("mem_total_gib", unit="GiB"),
    Column("predicted_mem_gib", "pred GiB", spec=".2f", unit="GiB",
           help="peak memory the search predicted before the trial started (--search)"),
    Column("why", help="why the planner ran or skipped the trial"),
    Column("energy_j_per_step", "J/step", spec=".0f", unit="J"),
    Column("final_loss", "loss", cell=_loss), Column("loss_drift_pct", unit="%"), Column("loss_ok"),
    Column("steps_measured", "steps", cell=_steps),
    Column("runs", "runs", cell=_runs, help="fresh-process runs pooled, with the spread of their medians"),
    Column("warmup_why", help="each run's warm-up steps and why they ended there (--warmup auto: once the step "
                              "times settled, or the ceiling; a fixed --warmup N)"),
    Column("runs_failed", help="runs of the trial that failed (a failed run's steps are not pooled with the others')"),
    Column("train_runtime_s", unit="s"), Column("repeat_spread_pct", unit="%"),
    Column("stopped_early"), Column("stop_reason", help="why tracetui's stopping rule ended a run (--until-confident)"),
    Column("trainer_stop", help="why the trainer ended a run before its planned steps: the callback that set "
                                "should_training_stop (early stopping, a loss watchdog, a NaN guard), or its data "
                                "running out"),
    *(c for b in BETWEEN for c in (
        Column(b.count_field, spec=".1f", help=f"{b.many} between steps, per run ({b.help}): timed apart, in no step"),
        Column(b.seconds_field, unit="s", spec=".2f", help=f"seconds of {b.many} between steps, per run"))),
    Column("bound", "bound", cell=bound_text), Column("evidence"),
    Column("projected_s", "projected", cell=_projected, unit="s"),
    Column("projected_between_s", unit="s", help="of projected_s: the evaluations, saves and logs the projected run "
                                                 "does between its steps (each as long as measured, as many as its "
                                                 "schedule gives)"),
    Column("projected_note", help="what projected_s counts between steps, or leaves out"),
    Column("gpus", "GPU", cell=lambda r, c: r.get("gpus") or "-", help="GPU indices of the runs"),
    Column("comm_ms", "comm", unit="ms", help="DDP: the exposed all-reduce time, the synchronising "
                                              "micro-batch's backward beyond the others'"),
    Column("comm_note", help="why there is no comm time (FSDP)"),
    Column("backward_sync_ms", unit="ms"),
    Column("peak_mem_gib_ranks", unit="GiB", help="each rank's peak memory, rank 0 first"),
    Column("ranks", "ranks", cell=_ranks), Column("slowest_rank"), Column("rank_spread_pct", unit="%"),
    Column("message"),
    Column("trained", help="a run whose trainer read back another split or setting than planned: what it "
                           "trained (its row keeps the plan's name; never pooled, no verdict)"),
    Column("split_applied", help="a swept script: how the split reached its trainer (command line, the script's "
                                 "own value, or applied by tracetui inside the trainer: Trainer(args=...), "
                                 "trainer.args before train())"),
    # how far the numbers can be trusted
    Column("ci_scope", help="runs: intervals carry the spread between fresh processes; steps: one run's steps only"),
    Column("too_few_steps"), Column("busy", help="why a run counts as taken on a busy machine"),
    Column("other_cpu_cores", help="CPU cores other processes used while the steps were measured (most of any run)"),
    Column("env_changed"), Column("loss_note"),
    Column("changes_result", help="why this trial does not compute what the others do (never recommended "
                                  "unless --allow-result-changes)"),
    Column("recommended", help="the recommended trial of its effective batch, under the same --allow-result-changes "
                               "and --allow-busy as the verdict; a busy column beside it says it was measured busy"),
    Column("first_step_ms", unit="ms", help="the first (warm-up) step: one-off costs, compiling included"),
    Column("start_s", unit="s", help="process start to the first step (median run)"),
    Column("start_imports_s", unit="s", help="of it: to building the model (the imports in a fresh interpreter; "
                                              "forked from the fork server, which imported them, the device's start)"),
    Column("start_model_s", unit="s", help="of it: building the model"),
    Column("start_data_s", unit="s", help="of it: preparing the data"),
    Column("start_interpreter_s", unit="s", help="of it (a swept script): the interpreter, to the script's first line "
           "(forked from tracetui's server: the fork, and the first run's wait for the server's imports)"),
    Column("start_script_s", unit="s", help="of it (a swept script): its own imports, model and data, to its Trainer"),
    Column("start_trainer_s", unit="s", help="of it: building the trainer"),
    Column("compile_s", unit="s", help="torch.compile's time: the first step beyond an ordinary one"),
    # settings varied that the read-back below does not name
    *(Column(name, help=f"--vary {name}: the value asked for") for name in KNOBS if name not in SETTING_COLUMNS),
    # what the trainer really ran with, read back from it
    Column("activation_checkpointing", "ckpt", cell=_ckpt),
    *(Column(name) for name in SETTING_COLUMNS if name != "activation_checkpointing"),
)

#: the CSV's and the JSON's columns, in order
CSV_KEYS: tuple[str, ...] = tuple(c.key for c in COLUMNS if c.csv)
#: the monitor's columns, in order
MONITOR: tuple[Column, ...] = tuple(c for c in COLUMNS if c.header is not None)


def table_context(rows: list[dict]) -> dict:
    """What every cell of one table needs to know about the others."""
    return {"multi_machine": len({r["machine"] for r in rows}) > 1,
            "multi_eb": len({r["effective_batch"] for r in rows}) > 1}


def check_rows(rows: list[dict]) -> list[str]:
    """Keys of the summary rows that no column declares: a misspelt key shows up here instead
    of as an empty cell."""
    declared = set(CSV_KEYS)
    extra = sorted({k for r in rows for k in r} - declared - _INTERNAL)
    return extra


#: row fields that are for the program, not for a table (the read-back settings as one dict,
#: intermediate values of the analysis)
_INTERNAL = {"settings", "fastest", "slowest", "forward_ms_per_micro", "warmup_steps", "memory_limit_gib", "loss_finite",
             "varied", "knob_values", "failed_kinds",
             # each other split of the group: the ratio of its step to this one's, paired, with its interval
             "paired_vs"}
#: every key a summary row may hold (:class:`tracetui.analysis.Row`): the CSV/JSON columns and
#: the program's own fields
ROW_KEYS: frozenset[str] = frozenset(CSV_KEYS) | _INTERNAL
