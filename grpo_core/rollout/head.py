"""The LM head and the token log-probs it feeds, fused, in pieces of rows: nothing of size
(tokens, vocabulary) is kept between the forward and the backward, and nothing of that size is
made beyond one piece's float32 logits.

Per piece of rows, the forward computes the logits (the head's matmul, in the weights' dtype),
scales them by the temperature in float32, and keeps only each row's log-sum-exp; the log-prob
of the target is its scaled logit less that. The backward recomputes the piece's logits and
applies the gradient of the log-prob with respect to them directly,

    d logp_t / d z_j = [j = t] - p_j,        d H / d z_j = -p_j (log p_j + H)

(z the scaled logits, p their softmax, H the entropy), then the head's matmul backward. This is
the CPU counterpart of a "fused linear cross-entropy" (Liger's on GPUs): one exp pass over the
logits forward and one backward, where `log_softmax`, `gather` and their autograd made a
dense (tokens, V) gradient, a dtype copy and a division of it each way, and activation
checkpointing ran the whole forward twice. The numbers are the same as the unfused path's up
to float rounding (`tests/test_head.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Float32 logits per piece: 16 MiB, 85 rows at SmolLM2's 49,152-token vocabulary. Chosen by
# one measurement, not kept as a benchmark: forward and backward of 16 x 96 bf16 hidden states
# through SmolLM2's head took 0.45 s in pieces of 16 MiB, 0.70 s of 4 MiB, 0.65 s of 64 MiB and
# 0.68 s of 256 MiB (the unfused path: 1.0 s). `scoring.LOGIT_CHUNK_BYTES` caps it for memory.
PIECE_BYTES = 2**24

# The exp of a float32 below about -87.3 is subnormal (or 0), and torch's vectorised exp takes
# a slow path there: 14.6 ms against 1.1 ms for 85 x 49,152 values on these cores. At a
# temperature of 0.2 most of a real vocabulary is that far below the top logit. Exponents are
# clamped to -87 (e^-87 = 1.6e-38): each such entry adds at most 1.6e-38 where 0 or a
# subnormal was, which no float32 sum that includes the top entry (1) can see.
EXP_FLOOR = -87.0


def _logits(hidden, weight, bias, temperature: float) -> torch.Tensor:
    z = F.linear(hidden, weight, bias).float()
    return z.div_(temperature) if temperature != 1.0 else z


def _forward(hidden, weight, bias, targets, temperature, with_entropy, rows):
    n = hidden.shape[0]
    logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
    lse = torch.empty_like(logp)
    entropy = torch.empty_like(logp) if with_entropy else None
    for s in range(0, n, rows):
        z = _logits(hidden[s : s + rows], weight, bias, temperature)
        target = z.gather(1, targets[s : s + rows, None]).squeeze(1)
        m = z.amax(dim=-1, keepdim=True)
        shifted = z.sub_(m).clamp_(min=EXP_FLOOR)  # z is not read again
        q = shifted.exp()  # softmax * total, its largest entry 1
        total = q.sum(-1)
        lse_c = m.squeeze(1) + total.log()
        lse[s : s + rows] = lse_c
        logp[s : s + rows] = target - lse_c
        if with_entropy:  # -sum p log p with p = q / total, log p = shifted - log(total)
            entropy[s : s + rows] = total.log() - (q.mul_(shifted)).sum(-1) / total
    return logp, lse, entropy


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, with_entropy, rows):
        logp, lse, entropy = _forward(
            hidden, weight, bias, targets, temperature, with_entropy, rows
        )
        ctx.save_for_backward(hidden, weight, bias, targets, lse, entropy)
        ctx.temperature, ctx.rows = temperature, rows
        if entropy is None:
            return logp, logp.new_empty(0)
        return logp, entropy

    @staticmethod
    def backward(ctx, g_logp, g_entropy):
        hidden, weight, bias, targets, lse, entropy = ctx.saved_tensors
        t, rows = ctx.temperature, ctx.rows
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        grad_b = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        use_h = entropy is not None and g_entropy is not None and g_entropy.numel()
        for s in range(0, hidden.shape[0], rows):
            h = hidden[s : s + rows]
            logp_all = _logits(h, weight, bias, t).sub_(lse[s : s + rows, None])
            p = logp_all.clamp_(min=EXP_FLOOR).exp()
            # The logits' gradient is the scaled logits' divided by the temperature: dividing
            # the incoming gradients first saves a pass over the piece.
            g = g_logp[s : s + rows, None] / t
            if use_h:  # -p (log p + H) g_H, then the log-prob's -p g
                gh = g_entropy[s : s + rows, None] / t
                grad_z = logp_all.add_(entropy[s : s + rows, None]).mul_(p).mul_(-gh)
                grad_z.sub_(p.mul_(g))
            else:
                grad_z = p.mul_(-g)
            grad_z.scatter_add_(1, targets[s : s + rows, None], g)
            grad_logits = grad_z.to(weight.dtype)
            if need_h:
                grad_h[s : s + rows] = grad_logits @ weight
            if need_w:
                grad_w.addmm_(grad_logits.t().float(), h.float())
            if need_b:
                grad_b += grad_z.sum(0)
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None, None


def fused_head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    piece_bytes: int = PIECE_BYTES,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (B, T) of `targets` under the linear LM head `head` on the hidden states
    `hidden` (B, T, H) at `temperature`, and the entropies (B, T) when `with_entropy` (with a
    gradient only when `entropy_grad`), in pieces of at most `piece_bytes` of float32 logits."""
    b, t = targets.shape
    weight, bias = head.weight, getattr(head, "bias", None)
    rows = max(1, piece_bytes // (4 * weight.shape[0]))
    flat_h, flat_t = hidden.reshape(b * t, -1), targets.reshape(b * t)
    trains = (
        hidden.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if torch.is_grad_enabled() and trains:
        logp, entropy = _FusedHead.apply(
            flat_h, weight, bias, flat_t, float(temperature), with_entropy, rows
        )
        entropy = entropy if entropy_grad else entropy.detach()
    else:
        with torch.no_grad():
            logp, _, entropy = _forward(
                flat_h, weight, bias, flat_t, float(temperature), with_entropy, rows
            )
    logp = logp.reshape(b, t)
    return logp, entropy.reshape(b, t) if with_entropy else None
