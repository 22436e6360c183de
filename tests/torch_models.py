"""The PyTorch models `tests/test_torch.py` packs: small, random weights, built in process (no
network). Each case is a module in eval mode, its example arguments, and the dynamic shapes
torch.export takes for it (or None). `transformers` models are built from small configs where
that package is installed (`hf_cases`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Case:
    module: nn.Module
    args: tuple[Any, ...]
    dynamic_shapes: Any = None


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc2(nn.functional.gelu(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(6)
        self.conv2 = nn.Conv2d(6, 8, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


class Recurrent(nn.Module):
    """An LSTM (torch.export unrolls it over the sequence), its last state through a head."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        causal = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        y, _ = self.attn(x, x, x, key_padding_mask=padding, attn_mask=causal)
        return self.norm(x + y)


class TiedLM(nn.Module):
    """An embedding and an LM head that share one weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.mix = nn.Linear(8, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mix(self.embed(tokens))))


class Unused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(4, 3)
        self.spare = nn.Parameter(torch.randn(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


class Bag(nn.Module):
    """Token ids in, a pooled embedding and a structured output out."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 6)
        self.out = nn.Linear(6, 3)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
        e = self.embed(tokens) * mask.unsqueeze(-1)
        pooled = e.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        logits = self.out(pooled)
        return {"logits": logits, "best": (logits.argmax(-1), pooled)}


class Shuffled(nn.Module):
    """Parameters, buffers and constants whose orders differ: registered in one order, kept by
    `state_dict` in another (buffers after parameters), used by the graph in a third, and a
    constant tensor the graph lifts. Binding any of them by position would mix up tensors of
    one shape."""

    def __init__(self) -> None:
        super().__init__()
        # Seeded: drawn from torch's global generator, they depended on what ran before, and
        # an `offsets` negative enough let the relu pass nothing, so that the result did not
        # depend on `a`'s weight (test_torch's swapped weights then gave the same answer); with
        # this seed half the relu's inputs are positive.
        g = torch.Generator().manual_seed(0)
        self.register_buffer("z_shift", torch.randn(4, generator=g))
        self.c = nn.Linear(4, 4)
        self.register_buffer("a_scale", torch.rand(4, generator=g) + 0.5, persistent=False)
        self.b = nn.Linear(4, 4)
        self.a = nn.Linear(4, 4)
        self.offsets = torch.randn(4, generator=g)  # a plain tensor attribute: a lifted constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x) * self.a_scale + self.offsets
        y = self.b(torch.relu(y)) - self.z_shift
        return self.c(y)


def _eval(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    for p in module.parameters():
        nn.init.normal_(p, std=0.3)
    for name, b in module.named_buffers():
        if name.endswith("running_var"):
            b.copy_(torch.rand_like(b) + 0.5)
        elif name.endswith("running_mean"):
            b.copy_(torch.randn_like(b) * 0.1)
    return module.eval()


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def cases() -> dict[str, Callable[[], Case]]:
    """Each case by name, built when called (with its weights drawn from a fixed seed)."""
    from torch.export import Dim

    g = _seeded(1)
    batch = Dim("batch", min=1, max=1024)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    mask = torch.tensor([[1.0] * 7, [1.0] * 4 + [0.0] * 3])
    return {
        "mlp": lambda: Case(_eval(MLP()), (torch.randn(4, 6, generator=g),)),
        "cnn": lambda: Case(_eval(CNN()), (torch.randn(2, 3, 12, 12, generator=g),)),
        "recurrent": lambda: Case(_eval(Recurrent()), (torch.randn(2, 3, 5, generator=g),)),
        "attention": lambda: Case(_eval(Attention()), (torch.randn(2, 5, 8, generator=g), padding)),
        "tied": lambda: Case(_eval(TiedLM()), (torch.randint(0, 20, (2, 6), generator=g),)),
        "unused": lambda: Case(_eval(Unused()), (torch.randn(3, 4, generator=g),)),
        "dynamic_batch": lambda: Case(
            _eval(MLP()), (torch.randn(5, 6, generator=g),), ({0: batch},)
        ),
        "token_ids": lambda: Case(_eval(Bag()), (torch.randint(0, 30, (2, 7), generator=g), mask)),
        "shuffled": lambda: Case(_eval(Shuffled()), (torch.randn(3, 4, generator=g),)),
    }


def hf_cases(layers: int = 2) -> dict[str, tuple[Callable[[], nn.Module], tuple[Any, ...]]]:
    """`transformers`' BERT, GPT-2, ViT and T5 (an encoder-decoder, its LM head tied to the
    embedding both stacks share) from small configs (nothing downloaded), each by name as (a
    function that builds it, its example inputs). `layers`: each stack's blocks (test_torch.py
    converts one: a second is the first's operators again, at a third more of the time)."""
    import transformers as tf

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    bert = tf.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
    )
    gpt2 = tf.GPT2Config(
        vocab_size=50, n_embd=16, n_layer=layers, n_head=2, n_positions=16, use_cache=False
    )
    vit = tf.ViTConfig(
        image_size=8,
        patch_size=4,
        num_channels=3,
        hidden_size=16,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=32,
    )
    t5 = tf.T5Config(
        vocab_size=50,
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=2,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        use_cache=False,
    )
    decoder_ids = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(4))
    return {
        "bert": (lambda: tf.BertModel(bert).eval(), (ids, mask)),
        "gpt2": (lambda: tf.GPT2LMHeadModel(gpt2).eval(), (ids,)),
        "vit": (lambda: tf.ViTModel(vit).eval(), (torch.randn(2, 3, 8, 8),)),
        # input_ids, attention_mask, decoder_input_ids: one teacher-forced step of every position
        "t5": (lambda: tf.T5ForConditionalGeneration(t5).eval(), (ids, mask, decoder_ids)),
    }
