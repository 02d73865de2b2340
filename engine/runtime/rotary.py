"""Rotary position embedding in the Hugging Face "rotate half" layout, over all of each head or its first
rotary_dim dimensions (phi-2's partial rotary: the rest pass through unrotated)."""
from __future__ import annotations

import torch


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_cos_sin(positions: torch.Tensor, rotary_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [T, 1, rotary_dim] of each position's angles; computed once per forward. The frequencies
    span the rotated dimensions only, as Hugging Face's partial rotary does (base theta over rotary_dim)."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, rotary_dim, 2, device=positions.device, dtype=torch.float32) / rotary_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)[:, None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """x [T, heads, head_dim] with its first rotary_dim dimensions rotated, in fp32."""
    cos, sin = cos_sin
    rotary_dim = cos.shape[-1]
    if rotary_dim == x.shape[-1]:
        x32 = x.float()
        return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)
    turned, passed = x[..., :rotary_dim].float(), x[..., rotary_dim:]
    return torch.cat(((turned * cos + rotate_half(turned) * sin).to(x.dtype), passed), dim=-1)
