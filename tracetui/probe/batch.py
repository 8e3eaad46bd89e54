"""What an optimizer step trained on: its micro-batches' losses, tokens and rows, summed on their
device as the step runs and read back with the step's record (no synchronisation)."""

from __future__ import annotations

from typing import Any


def row_sums(torch: Any, ids: Any, mask: Any, labels: Any, positions: Any) -> Any:
    """What one micro-batch trains on, as four whole numbers left on its device (summed there, read
    back with the step's loss once its end event has completed: no synchronisation): its real tokens
    (the attention mask's sum), the sum of their ids, the positions the loss scores (next-token labels
    that are not -100; -1 without labels) and the query-key pairs attention spans (the sum over
    sequences of their length squared: from the position ids of a padding-free batch, -1 where the
    padded shape gives it). None for inputs that are not a batch of token ids."""
    if torch is None or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
        return None
    if isinstance(mask, torch.Tensor) and mask.shape == ids.shape:
        m = mask.to(torch.int64)
        real, id_sum = m.sum(), (ids * m).sum()
    else:
        real, id_sum = ids.new_full((), ids.numel(), dtype=torch.int64), ids.sum(dtype=torch.int64)
    if isinstance(labels, torch.Tensor) and labels.shape == ids.shape:
        scored = (labels[:, 1:] != -100).sum()
    else:
        scored = real.new_full((), -1)
    if mask is None and isinstance(positions, torch.Tensor) and positions.shape == ids.shape:
        pairs = (2 * positions.to(torch.int64) + 1).sum()  # a sequence of n positions 0..n-1 sums to n*n
    else:
        pairs = real.new_full((), -1)
    return torch.stack([real.to(torch.int64), id_sum.to(torch.int64), scored.to(torch.int64), pairs])


def fingerprint(tokens: int, id_sum: int) -> str:
    """The rows an optimizer step trained on, in a few characters: from its real tokens and the sum
    of their ids over all its micro-batches, so the same rows give the same fingerprint however
    they are split into micro-batches, padded or packed into a padding-free row."""
    import hashlib

    return hashlib.blake2b(f"{tokens}:{id_sum}".encode(), digest_size=6).hexdigest()


def first_grad_tensor(output: Any) -> Any:
    """The first output tensor that requires grad: the loss if the model computed it, else
    what the loss is computed from (logits, or TRL's fused ``log_probs``)."""
    import torch

    if isinstance(output, torch.Tensor):
        return output if output.requires_grad else None
    values = output.values() if hasattr(output, "values") else output if isinstance(output, (tuple, list)) else ()
    for v in values:
        if isinstance(v, torch.Tensor) and v.requires_grad:
            return v
    return None


def queue_rows(torch: Any, rows: list, shapes: list, cuda: bool) -> Any:
    """The step's :func:`row_sums`, one row a micro-batch, on their way to the host (None where a
    micro-batch had none)."""
    if not rows or len(rows) != len(shapes):
        return None
    stacked = torch.stack(rows)
    return stacked.to("cpu", non_blocking=True) if cuda else stacked


def queue_values(torch: Any, losses: list, tokens: list, cuda: bool) -> Any:
    """The step's summed loss and attention-mask tokens (NaN for what was not seen), on their way
    to the host; None where neither was seen."""
    if not losses and not tokens:
        return None
    parts = [torch.stack(losses).sum().reshape(1) if losses else None,
             torch.stack(tokens).sum().float().reshape(1) if tokens else None]
    dev = losses[0].device if losses else tokens[0].device
    nan = torch.full((1,), float("nan"), device=dev)
    stacked = torch.cat([p if p is not None else nan for p in parts])
    return stacked.to("cpu", non_blocking=True) if cuda else stacked


def trained_on(item: dict, logged_loss: dict[int, float]) -> tuple[Any, Any, dict]:
    """A finished step's loss, tokens, and what its record's ``extra`` says of its rows
    (fingerprint, scored tokens, attention's query-key pairs), from what :func:`queue_values` and
    :func:`queue_rows` sent to the host; a loss the step did not see is the one the trainer logged."""
    loss = tokens = None
    if item["values"] is not None:
        vals = item["values"].tolist()
        loss = vals[0] if item["has_loss"] else None
        tokens = int(vals[1]) if item["has_tokens"] else None
    if loss is None:
        loss = logged_loss.pop(item["step"], None)
    extra: dict = {}
    if item["rows"] is not None:
        sums = item["rows"].tolist()  # per micro-batch: real tokens, their ids' sum, scored, pairs
        tokens = sum(r[0] for r in sums)
        extra["fingerprint"] = fingerprint(tokens, sum(r[1] for r in sums))
        scored = [r[2] for r in sums]
        extra["scored_tokens"] = sum(scored) if min(scored) >= 0 else None
        extra["token_pairs"] = sum(p if p >= 0 else b * t * t for (b, t), (*_, p) in zip(item["shapes"], sums))
    if tokens is None:
        tokens = item["padded"] or None
    return loss, tokens, extra
