"""The work each step does (tracetui.core.flops): the formula against torch's own FLOP counter on a
real optimizer step of the tiny preset with LoRA, ragged rows, checkpointing off and on; the
peaks MFU is measured against; MFU in the summary, the recommendation and the detail pane."""

from pathlib import Path

import pytest

from tracetui.analysis import Results, recommendation, summarise
from tracetui.events.schema import make
from tracetui.core.flops import Profile, model_profile, peak_tflops, profile_of_config, step_work
from tracetui.core.presets import PRESETS
from tracetui.events.log import read_events

DATA = Path(__file__).parent / "data"


def one_step_counted(tmp_path, checkpointing: bool):
    """One optimizer step (2 micro-batches of 2 ragged rows) of the tiny preset with LoRA on all
    linear layers, trained by TRL under ``FlopCounterMode``; the probe's step event and read-back
    settings, and the FLOPs torch counted."""
    from torch.utils.flop_counter import FlopCounterMode

    from tracetui.core.config import SweepConfig
    from tracetui.probe.callback import Probe
    from tracetui.runner.worker import build_trainer, resolve_precision

    # eager attention: its products are matmuls the counter sees (the CPU's fused SDPA kernel has
    # no FLOP formula in torch's counter, so it would count no attention at all)
    cfg = SweepConfig(steps=1, warmup=0, seq_len=64, dataset="synthetic-ragged", effective_batch=[4],
                      activation_checkpointing=checkpointing, attn_implementation="eager", runs_dir=str(tmp_path))
    events = []
    precision, dtype = resolve_precision("fp32", "cpu")
    trainer = build_trainer(cfg, 2, 2, "cpu", precision, dtype, str(tmp_path), probe=Probe(events.append, "t", warmup=0))
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.train()
    step = next(e for e in events if e["type"] == "step")
    settings = next(e for e in events if e["type"] == "run_settings")["settings"]
    assert settings["activation_checkpointing"] is checkpointing
    return step, settings, counter.get_total_flops()


@pytest.mark.slow
@pytest.mark.anywhere
def test_formula_matches_torchs_flop_counter_on_a_real_lora_step(tmp_path):
    """Within 5% of what torch counted, with and without activation checkpointing, on rows of
    different lengths (padded per micro-batch); model FLOPs the same either way."""
    model_flops = {}
    for checkpointing in (False, True):
        step, settings, counted = one_step_counted(tmp_path, checkpointing)
        shapes = [tuple(s) for s in step["micro_shapes"]]
        assert len(shapes) == 2 and len({t for _, t in shapes}) == 2  # two micro-batches, padded apart
        assert step["tokens"] < sum(b * t for b, t in shapes)  # ragged: padding was processed
        # every real token but each row's last is scored (the labels are the inputs, shifted)
        assert step["scored_tokens"] == step["tokens"] - step["samples"]
        profile = Profile.from_dict(settings["model_work"])
        # read from the built model, the same as from the preset's configuration and the LoRA asked
        assert profile == profile_of_config(PRESETS["tiny"][0], 16, "all-linear")
        # What ran here: TRL's fused head projects every position but each row's last on a device
        # without Triton; eager attention computes the masked half too (and torch counts it)
        work = step_work(profile, shapes, checkpointing=checkpointing,
                         head_tokens=sum(b * (t - 1) for b, t in shapes), causal=False)
        assert work.hardware == pytest.approx(counted, rel=0.05), (checkpointing, work, counted)
        if checkpointing:
            assert work.recompute > 0.25 * work.model
        else:
            assert work.recompute == 0
        model_flops[checkpointing] = step_work(profile, shapes, checkpointing=checkpointing,
                                               head_tokens=step["scored_tokens"], pairs=step["token_pairs"]).model
    assert model_flops[True] == model_flops[False]


def test_backward_through_frozen_weights_is_one_forward_and_adapters_train():
    """For LoRA the backward computes input gradients through the frozen base (about one
    forward's products) and weight gradients for the adapters only: about 2x forward for the
    whole step, not the 3x of full fine-tuning."""
    p = profile_of_config(PRESETS["qwen3-1.7b"][0], 16, "all-linear")
    full = Profile(**{**p.to_dict(), "trainable": p.gemm})  # every layer's weight trains (the head frozen)
    lora = step_work(p, [(4, 512)])
    assert 1.0 < lora.backward / lora.forward < 1.05
    assert 1.75 < step_work(full, [(4, 512)]).backward / step_work(full, [(4, 512)]).forward < 2.05
    # the causal mask halves attention; checkpointing's recompute is hardware FLOPs only
    assert step_work(p, [(1, 4096)], causal=False).attention == 2 * step_work(p, [(1, 4096)]).attention
    ck = step_work(p, [(4, 512)], checkpointing=True)
    assert ck.model == lora.model and ck.hardware > 1.3 * ck.model


@pytest.mark.parametrize("name, precision, peak", [
    ("NVIDIA H200", "bf16", 989.0), ("NVIDIA H100 80GB HBM3", "bf16", 989.0), ("NVIDIA H100 PCIe", "bf16", 756.0),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0), ("NVIDIA L40S", "bf16", 362.0), ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA A10", "bf16", 125.0), ("Tesla T4", "fp16", 65.0), ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
    ("NVIDIA H100 80GB HBM3", "tf32", 494.0),
])
def test_peaks_of_known_gpus(name, precision, peak):
    assert peak_tflops(name, precision)[0] == peak


@pytest.mark.parametrize("name, precision, says", [
    ("NVIDIA A10G", "bf16", "unknown GPU (NVIDIA A10G)"), ("NVIDIA H100 NVL", "bf16", "unknown GPU"),
    ("Tesla T4", "bf16", "T4 has no bf16 peak"), (None, "bf16", "no GPU"),
])
def test_no_peak_is_said_plainly(name, precision, says):
    peak, why = peak_tflops(name, precision)
    assert peak is None and why.startswith(says)


def _run(gpu_name, peak=None):
    """A one-split run on a GPU, 512-token rows of qwen3-1.7b with LoRA, 100 ms a step."""
    config = {"model": "qwen3-1.7b", "seq_len": 512, "lora_r": 16, "lora_targets": "all-linear"}
    if peak:
        config["peak_tflops"] = peak
    events = [make("run_started", "s/4x1", label="4x1", micro_batch=4, grad_accum=1, effective_batch=4,
                   precision="bf16", env={"device": "cuda", "gpu_name": gpu_name}, config=config)]
    work = profile_of_config(PRESETS["qwen3-1.7b"][0], 16, "all-linear")
    events.append(make("run_settings", "s/4x1", settings={"model_work": work.to_dict(),
                                                          "precision_used": "bf16 (weights bfloat16)",
                                                          "activation_checkpointing": False}))
    for k in range(1, 11):
        events.append(make("step", "s/4x1", step=k, warmup=False, wall_ms=100.0, forward_ms=[40.0], backward_ms=[60.0],
                           tokens=1500, samples=4, micro_shapes=[[4, 512]], scored_tokens=1496, token_pairs=4 * 512**2))
    events.append(make("run_finished", "s/4x1"))
    expected = step_work(work, [(4, 512)], head_tokens=1496).model
    return summarise(Results().extend(events))[0], expected


def test_mfu_in_the_summary_and_the_recommendation():
    row, flop = _run("NVIDIA H100 80GB HBM3")
    assert row["tflop_per_step"] == pytest.approx(flop / 1e12)
    assert row["tflops"] == pytest.approx(flop / 1e12 / 0.1)
    assert row["mfu_pct"] == pytest.approx(100 * row["tflops"] / 989.0) and row["peak_tflops"] == 989.0
    assert row["padding_pct"] == pytest.approx(100 * (1 - 1500 / 2048))
    assert row["mfu_note"].startswith("against the H100 SXM bf16 dense peak, 989 TFLOP/s; 27% of the positions")
    assert f"it runs at {row['mfu_pct']:.0f}% MFU ({row['tflops']:.1f} TFLOP/s against the H100 SXM" in \
        recommendation([row])


def test_a_model_profile_that_cannot_be_read_says_why_mfu_is_blank():
    """A failure while reading a model's layers leaves MFU blank, and the summary's note says why
    (it was a blank MFU with no word)."""
    class Broken:
        config = None

        def modules(self):
            raise RuntimeError("a layer that cannot be listed")

    profile, why = model_profile(Broken())
    assert profile is None and why == "reading the model's layers failed (RuntimeError: a layer that cannot be listed)"
    config = {"model": "org/own-model", "seq_len": 512}
    events = [make("run_started", "s/4x1", label="4x1", micro_batch=4, grad_accum=1, effective_batch=4,
                   precision="bf16", env={"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3"}, config=config),
              make("run_settings", "s/4x1", settings={"model_work": None, "model_work_missing": why})]
    events += [make("step", "s/4x1", step=k, warmup=False, wall_ms=100.0, forward_ms=[40.0], backward_ms=[60.0],
                    tokens=2048, samples=4, micro_shapes=[[4, 512]]) for k in range(1, 11)]
    row = summarise(Results().extend(events + [make("run_finished", "s/4x1")]))[0]
    assert row.get("mfu_pct") is None and row.get("tflops") is None
    assert row["mfu_note"] == f"no FLOPs: {why}"


def test_unknown_gpu_gets_no_mfu_and_says_so_and_a_given_peak_is_used():
    row, _ = _run("NVIDIA B300 Ultra")
    assert row["mfu_pct"] is None and row["tflops"] > 0
    assert row["mfu_note"].startswith("unknown GPU (NVIDIA B300 Ultra): no peak, no MFU")
    assert "TFLOP/s (unknown GPU (NVIDIA B300 Ultra)" in recommendation([row])
    row, _ = _run("NVIDIA B300 Ultra", peak=2000.0)  # --peak-tflops, as the sweep's config records it
    assert row["mfu_pct"] == pytest.approx(100 * row["tflops"] / 2000.0)
    assert "--peak-tflops" in row["mfu_note"]


def test_recorded_h200_sweep_has_its_mfu_from_the_presets_configuration():
    """A log from before the layers were read back: qwen3-1.7b's configuration, full 512-token rows."""
    rows = {r["split"]: r for r in summarise(Results().extend(read_events([DATA / "h200_sweep.jsonl"]).events))}
    p = profile_of_config(PRESETS["qwen3-1.7b"][0], 16, "all-linear")
    flop = step_work(p, [(1, 512)] * 4).model
    for r in rows.values():
        assert r["tflop_per_step"] == pytest.approx(flop / 1e12) and r["padding_pct"] == 0
        assert r["mfu_pct"] == pytest.approx(100 * flop / 1e12 / (r["step_ms_median"] / 1000) / 989.0)
    assert 2 < rows["4x1"]["mfu_pct"] < 5 and rows["1x4"]["mfu_pct"] < 1  # host-bound: far from the peak
