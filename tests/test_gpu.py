"""GPU-only checks (skipped without CUDA): the probe adds no host-device synchronisation."""

import types

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class TinyLM(torch.nn.Module):
    """Plain torch ops only, so any sync the debug mode catches comes from the probe."""

    def __init__(self, vocab=512, dim=256):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.l1 = torch.nn.Linear(dim, dim)
        self.l2 = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab)
        self.emb.weight.requires_grad_(False)

    def forward(self, input_ids=None, attention_mask=None, labels=None):
        h = self.emb(input_ids)
        h = torch.relu(self.l1(h))
        h = torch.relu(self.l2(h))
        return {"logits": self.head(h)}


def _drive(probe, model, steps, ga, mb, seq=64):
    """The callback order of transformers' Trainer, by hand; after each odd step, what the
    trainer does between steps: a log, an evaluation (a forward in eval mode) and a save."""
    from transformers import TrainerControl, TrainerState

    args = types.SimpleNamespace(process_index=0)
    state, control = TrainerState(), TrainerControl()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    gen = torch.Generator(device="cuda").manual_seed(0)
    batches = [torch.randint(0, 512, (mb, seq), device="cuda", generator=gen) for _ in range(steps * ga)]
    masks = torch.ones(mb, seq, device="cuda", dtype=torch.long)
    masks[: mb // 2, seq // 2:] = 0  # half the rows padded to twice their length: ragged
    probe.on_train_begin(args, state, control, model=model)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for s in range(steps):
            probe.on_step_begin(args, state, control)
            for i in range(ga):
                ids = batches[s * ga + i]
                # what a step trained on is read on the device too (row fingerprint, scored labels)
                out = model(input_ids=ids, attention_mask=masks, labels=ids.masked_fill(masks == 0, -100))
                loss = torch.nn.functional.cross_entropy(out["logits"].flatten(0, 1), ids.flatten()) / ga
                loss.backward()
                probe.add_loss(loss)
                if i < ga - 1:
                    probe.on_substep_end(args, state, control)
            probe.on_pre_optimizer_step(args, state, control)
            opt.step()
            probe.on_optimizer_step(args, state, control)
            opt.zero_grad(set_to_none=True)
            probe.on_step_end(args, state, control)
            if s % 2 == 0:  # (steps 1, 3, 5)
                probe.on_log(args, state, control, logs={"loss": 1.0})
                model.eval()
                with torch.no_grad():
                    model(input_ids=batches[0])
                model.train()
                probe.on_log(args, state, control, logs={"eval_loss": 1.0})
                probe.on_evaluate(args, state, control, metrics={"eval_loss": 1.0})
                probe.on_save(args, state, control)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    probe.on_train_end(args, state, control)


def test_probe_adds_no_sync():
    from tracetui.probe.callback import Probe

    events = []
    model = TinyLM().cuda()
    probe = Probe(events.append, "gpu-test", warmup=1)
    _drive(probe, model, steps=6, ga=3, mb=4)
    steps = [e for e in events if e["type"] == "step"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4, 5, 6]
    for e in steps:
        assert len(e["forward_ms"]) == 3 and len(e["backward_ms"]) == 3
        assert all(x > 0 for x in e["forward_ms"] + e["backward_ms"])
        parts = e["data_ms"] + sum(e["forward_ms"]) + sum(e["backward_ms"]) + e["optimizer_ms"] + e["other_ms"]
        assert parts == pytest.approx(e["wall_ms"], rel=1e-3)
        assert e["tokens"] == 3 * (4 * 64 - 2 * 32) and e["samples"] == 12
        assert e["micro_shapes"] == [[4, 64]] * 3 and e["token_pairs"] == 3 * 4 * 64 * 64
        assert e["scored_tokens"] == 3 * (4 * 63 - 2 * 32)  # each row's first input is no label
        assert e["loss"] == pytest.approx(6.2, abs=0.5)  # ln(512) at random init
        assert e["peak_mem_gib"] > 0
    assert len({e["fingerprint"] for e in steps}) == 6  # six steps, six sets of rows
    # the work between steps timed on the same events, charged to no step
    assert [e["step"] for e in steps if "between_ms" in e] == [1, 3, 5]
    assert all(e["between_ms"].keys() == {"log", "eval", "save"} and e["between_ms"]["eval"][0] > 0
               for e in steps if "between_ms" in e)


def test_memory_limit_turns_a_too_large_split_into_oom(tmp_path):
    """--memory-limit caps a run's CUDA memory: the large micro-batch runs out, frees its
    memory with its process, and the sweep goes on to a split that fits."""
    from tracetui.core.checks import validate
    from tracetui.core.config import SweepConfig
    from tracetui.runner.sweep import Sweep

    cfg = SweepConfig(effective_batch=[32], splits="32x1,1x32", repeats=1, steps=3, warmup=1, seq_len=1024,
                      memory_limit=0.3, device="cuda", runs_dir=str(tmp_path))
    events = []
    sweep = Sweep(cfg, validate(cfg), on_event=events.append)
    outcomes = sweep.run()
    sweep.close()
    assert list(outcomes.values()) == ["oom", "ok"]
    failed = [e for e in events if e["type"] == "run_failed"][0]
    assert "out of memory at micro-batch 32" in failed["message"]
    peaks = [e["peak_mem_gib"] for e in events if e["type"] == "step" and e["run_id"].endswith("1x32")]
    assert peaks and max(peaks) < 0.3
