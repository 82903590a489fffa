"""A BERT encoder with a masked-language-model head, and synthetic MLM batches, for training studies.

BERT (Devlin et al., 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding") in its original post-LayerNorm layout: word, position and token-type embeddings,
``layers`` encoder layers, and the masked-LM head whose decoder shares the word embedding matrix.
There is no pooler: masked-LM pre-training does not use it. Weights are random and batches
synthetic, because the studies measure the cost of a training step.

Attention is written out (separate query, key and value projections, ``matmul``, ``softmax``) rather
than taken from ``torch.nn.MultiheadAttention`` or ``scaled_dot_product_attention``: it keeps BERT's
own parameter layout, and it runs unchanged on every runtime the project benchmarks, including
PopTorch's torch 2.0.1 and the TorchScript ONNX exporter, with no fused kernel that one of them lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor
from torch import nn
from torch.nn import functional

__all__ = [
    "BERT_BASE",
    "BERT_STUDY",
    "IGNORE_INDEX",
    "MASKED_FRACTION",
    "BertConfig",
    "BertForMaskedLM",
    "BertModel",
    "build",
    "mlm_loss",
    "parameter_count",
    "training_batch",
]

#: Label of a position the masked-LM loss ignores (``cross_entropy``'s default ``ignore_index``).
IGNORE_INDEX = -100
#: Fraction of positions BERT's pre-training predicts.
MASKED_FRACTION = 0.15
#: LayerNorm epsilon of the original BERT.
_LAYER_NORM_EPS = 1e-12
#: Standard deviation of BERT's normal weight initialisation.
_INIT_STD = 0.02


@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT encoder.

    Attributes:
        vocab_size: Tokens in the vocabulary (rows of the word embedding).
        hidden: Width of the hidden states.
        layers: Encoder layers.
        heads: Attention heads per layer; must divide ``hidden``.
        intermediate: Width of the feed-forward layer.
        max_positions: Longest sequence (rows of the position embedding).
        type_vocab: Token types (segments).
        dropout: Dropout probability of embeddings, attention probabilities and residual branches.
    """

    vocab_size: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    type_vocab: int = 2
    dropout: float = 0.1

    def __post_init__(self) -> None:
        """Reject sizes no BERT can have, naming the field."""
        for name in (
            "vocab_size",
            "hidden",
            "layers",
            "heads",
            "intermediate",
            "max_positions",
            "type_vocab",
        ):
            value = getattr(self, name)
            if value < 1:
                msg = f"BertConfig: {name}={value} must be >= 1"
                raise ValueError(msg)
        if self.hidden % self.heads:
            msg = (
                f"BertConfig: hidden={self.hidden} is not divisible by heads={self.heads}; "
                "pick heads that divide hidden"
            )
            raise ValueError(msg)
        if not 0.0 <= self.dropout < 1.0:
            msg = f"BertConfig: dropout={self.dropout} must be in [0, 1)"
            raise ValueError(msg)


#: BERT-base (110M parameters with its pooler), the sizes of the original paper.
BERT_BASE = BertConfig(
    vocab_size=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512
)

#: The training studies' BERT: BERT-small of Turc et al. (2019, "Well-Read Students Learn Better"),
#: 4 layers of width 512 with BERT-base's vocabulary and positions. Chosen because one training step
#: (forward, backward, AdamW) at batch 8 and sequence 128 takes about a second on two CPU cores with
#: torch 2.13: short enough for a study on a CPU, long enough that the step dominates the harness.
BERT_STUDY = BertConfig(vocab_size=30522, hidden=512, layers=4, heads=8, intermediate=2048, max_positions=512)


class Embeddings(nn.Module):
    """Sum of word, position and token-type embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig) -> None:
        """Create the three tables of ``config``'s sizes."""
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden)
        self.position = nn.Embedding(config.max_positions, config.hidden)
        self.token_type = nn.Embedding(config.type_vocab, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=_LAYER_NORM_EPS)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        """Embed ``(B, S)`` token ids and token types into ``(B, S, hidden)``."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        out = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        embedded: Tensor = self.dropout(self.norm(out))
        return embedded


class SelfAttention(nn.Module):
    """Multi-head self-attention over unpadded sequences, with its output projection."""

    def __init__(self, config: BertConfig) -> None:
        """Create the query, key, value and output projections."""
        super().__init__()
        self.heads = config.heads
        self.head_size = config.hidden // config.heads
        self.query = nn.Linear(config.hidden, config.hidden)
        self.key = nn.Linear(config.hidden, config.hidden)
        self.value = nn.Linear(config.hidden, config.hidden)
        self.output = nn.Linear(config.hidden, config.hidden)
        self.dropout = nn.Dropout(config.dropout)

    def _split(self, x: Tensor) -> Tensor:
        """``(B, S, hidden)`` to ``(B, heads, S, head_size)``."""
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_size).transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        """Attend every position to every position of ``(B, S, hidden)``; same shape out."""
        query, key, value = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(probs, value).transpose(1, 2).flatten(2)
        out: Tensor = self.output(context)
        return out


class EncoderLayer(nn.Module):
    """A post-LayerNorm transformer layer: attention, then the GELU feed-forward, each residual."""

    def __init__(self, config: BertConfig) -> None:
        """Create the attention and feed-forward sublayers and their LayerNorms."""
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden, eps=_LAYER_NORM_EPS)
        self.intermediate = nn.Linear(config.hidden, config.intermediate)
        self.output = nn.Linear(config.intermediate, config.hidden)
        self.output_norm = nn.LayerNorm(config.hidden, eps=_LAYER_NORM_EPS)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        """Transform ``(B, S, hidden)`` hidden states; same shape out."""
        x = self.attention_norm(x + self.dropout(self.attention(x)))
        feed_forward = self.output(functional.gelu(self.intermediate(x)))
        out: Tensor = self.output_norm(x + self.dropout(feed_forward))
        return out


class BertModel(nn.Module):
    """Embeddings and the encoder stack: token ids to final hidden states."""

    def __init__(self, config: BertConfig) -> None:
        """Create the embeddings and ``config.layers`` encoder layers."""
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """Encode ``(B, S)`` token ids (token type 0 when not given) into ``(B, S, hidden)``."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        for layer in self.layers:
            hidden = layer(hidden)
        out: Tensor = hidden
        return out


class MaskedLMHead(nn.Module):
    """Dense, GELU, LayerNorm, then a decoder to the vocabulary whose weight is the word embedding."""

    def __init__(self, config: BertConfig, word_embedding: nn.Embedding) -> None:
        """Create the transform and tie the decoder to ``word_embedding``'s weight."""
        super().__init__()
        self.dense = nn.Linear(config.hidden, config.hidden)
        self.norm = nn.LayerNorm(config.hidden, eps=_LAYER_NORM_EPS)
        self.decoder = nn.Linear(config.hidden, config.vocab_size)
        # Tied, as in BERT: the decoder reads tokens out with the matrix the embedding reads them in
        # with, so the largest matrix of the model is stored, trained and counted once.
        self.decoder.weight = word_embedding.weight

    def forward(self, hidden: Tensor) -> Tensor:
        """Score every vocabulary entry at every position: ``(B, S, hidden)`` to ``(B, S, vocab)``."""
        logits: Tensor = self.decoder(self.norm(functional.gelu(self.dense(hidden))))
        return logits


class BertForMaskedLM(nn.Module):
    """BERT with its masked-LM head: token ids to per-position vocabulary logits."""

    def __init__(self, config: BertConfig) -> None:
        """Create the encoder and the tied head, and initialise them as BERT does."""
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.head = MaskedLMHead(config, self.bert.embeddings.word)
        self.apply(_init_weights)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """Logits ``(B, S, vocab_size)`` for ``(B, S)`` token ids."""
        logits: Tensor = self.head(self.bert(input_ids, token_type_ids))
        return logits


def _init_weights(module: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases, LayerNorm at identity."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=_INIT_STD)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def build(config: BertConfig, seed: int = 0) -> BertForMaskedLM:
    """A masked-LM BERT of ``config``'s sizes whose weights depend only on ``seed``, in training mode.

    Seeding happens on a forked RNG, so the caller's global torch RNG state is left untouched.
    """
    # fork_rng also saves and restores the accelerator generators, which manual_seed reseeds too.
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForMaskedLM(config)
    return model.train()


def parameter_count(model: nn.Module) -> int:
    """Trainable-or-not parameters of ``model``, a tied matrix counted once."""
    # Module.parameters() yields a shared Parameter once, which is the count that tying promises.
    return sum(parameter.numel() for parameter in model.parameters())


def mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over the positions whose label is not ``IGNORE_INDEX``.

    Args:
        logits: ``(B, S, vocab)`` scores from :class:`BertForMaskedLM`.
        labels: ``(B, S)`` token ids to predict, ``IGNORE_INDEX`` where nothing is predicted.

    Returns:
        A scalar; NaN when no position is labelled (there is nothing to average).

    Raises:
        ValueError: If the shapes of ``logits`` and ``labels`` do not match.
    """
    if logits.dim() < 2 or logits.shape[:-1] != labels.shape:
        msg = (
            f"mlm_loss: logits of shape {tuple(logits.shape)} do not match labels of shape "
            f"{tuple(labels.shape)}; logits must be labels' shape plus a vocabulary dimension"
        )
        raise ValueError(msg)
    return functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


def training_batch(config: BertConfig, batch: int, seq: int, seed: int) -> tuple[Tensor, Tensor]:
    """A synthetic masked-LM batch that depends only on its arguments.

    Token ids are uniform over the vocabulary. In every sequence ``round(0.15 * seq)`` positions (at
    least one) are labelled with the token there; the rest are ``IGNORE_INDEX``. The token ids are
    left in place at labelled positions: a step's cost does not depend on which id is fed.

    Args:
        config: The model the batch is for (vocabulary and longest sequence).
        batch: Sequences in the batch (>= 1).
        seq: Tokens per sequence, 1 to ``config.max_positions``.
        seed: Seed of the batch's own generator (the global RNG is not used).

    Returns:
        ``(input_ids, labels)``, both int64 of shape ``(batch, seq)``.

    Raises:
        ValueError: If ``batch`` is below 1 or ``seq`` is outside ``[1, config.max_positions]``.
    """
    if batch < 1:
        msg = f"training_batch: batch={batch} must be >= 1"
        raise ValueError(msg)
    if not 1 <= seq <= config.max_positions:
        msg = f"training_batch: seq={seq} must be in [1, {config.max_positions}] (the config's max_positions)"
        raise ValueError(msg)
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, config.vocab_size, (batch, seq), generator=generator)
    # An exact count per sequence (not a coin per position) so that every sequence, however short,
    # has a labelled position and the loss is never an average over nothing.
    labelled = max(1, round(MASKED_FRACTION * seq))
    order = torch.rand((batch, seq), generator=generator).argsort(dim=1)
    chosen = order[:, :labelled]
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels.scatter_(1, chosen, input_ids.gather(1, chosen))
    return input_ids, labels
