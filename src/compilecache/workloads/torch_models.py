"""The small torch models of the workloads, at a module's top level: torch's precompile mode
(Dynamo packages) can save only objects whose classes another process can import by name.

Imported by :mod:`compilecache.workloads.torch_step` after it has set torch's directories.
"""

from __future__ import annotations

from typing import Any

from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_in, hidden)
        self.down = nn.Linear(hidden, d_out)

    def forward(self, x: Any) -> Any:
        return self.down(nn.functional.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, ratio: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, ratio * d, d)

    def forward(self, x: Any) -> Any:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))
