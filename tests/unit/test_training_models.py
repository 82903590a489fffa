"""Unit tests for the training studies' models and data: ResNet-50, BERT and the digits runs."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import pytest

from pytest_ipu.backports import zip_strict

torch = pytest.importorskip("torch")

from torch.nn import functional  # noqa: E402

from benchmarks.models import bert  # noqa: E402
from benchmarks.models import resnet  # noqa: E402


def _one_line(error: pytest.ExceptionInfo[ValueError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


# ResNet-50 ----------------------------------------------------------------------------------------


def test_resnet50_has_torchvisions_parameter_count() -> None:
    count = sum(p.numel() for p in resnet.resnet50().parameters())
    assert count == 25_557_032
    assert count == resnet.RESNET50_PARAMETERS


def test_resnet50_is_v1_5_with_plain_bottlenecks() -> None:
    model = resnet.resnet50()
    stages = [model.layer1, model.layer2, model.layer3, model.layer4]
    assert [len(stage) for stage in stages] == [3, 4, 6, 3]
    for stage, planes in zip_strict(stages, (64, 128, 256, 512)):
        first = stage[0]
        # v1.5: the 3x3 convolution downsamples, the 1x1 before it keeps the resolution.
        assert first.conv1.stride == (1, 1)
        assert first.conv2.stride == ((1, 1) if planes == 64 else (2, 2))
        for block in stage:
            assert block.conv2.groups == 1
            assert block.conv2.out_channels == planes
            assert block.conv3.out_channels == 4 * planes


def test_resnet50_trains_one_step_with_finite_gradients() -> None:
    model = resnet.build(seed=0)
    images, labels = resnet.training_batch(2, 64, seed=0)
    logits = model(images)
    assert logits.shape == (2, 1000)
    functional.cross_entropy(logits, labels).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_resnet_build_is_deterministic_per_seed() -> None:
    first = resnet.build(seed=3).state_dict()
    same = resnet.build(seed=3).state_dict()
    other = resnet.build(seed=4).state_dict()
    assert all(torch.equal(first[k], same[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first)


def test_resnet_training_batch_shape_range_and_seed() -> None:
    torch.manual_seed(99)
    before = torch.get_rng_state()
    images, labels = resnet.training_batch(4, 96, seed=1)
    assert torch.equal(torch.get_rng_state(), before)
    assert images.shape == (4, 3, 96, 96)
    assert images.dtype == torch.float32
    assert labels.shape == (4,)
    assert labels.dtype == torch.int64
    assert int(labels.min()) >= 0
    assert int(labels.max()) < 1000
    again = resnet.training_batch(4, 96, seed=1)
    other = resnet.training_batch(4, 96, seed=2)
    assert torch.equal(images, again[0])
    assert torch.equal(labels, again[1])
    assert not torch.equal(images, other[0])


def test_resnet_training_batch_labels_cover_the_classes() -> None:
    _, labels = resnet.training_batch(4000, 1, seed=0)
    # 4000 draws from 1000 classes: far more than 900 distinct unless the range is cut short.
    assert labels.unique().numel() > 900
    assert int(labels.max()) == 999


@pytest.mark.parametrize(("batch", "image", "name"), [(0, 64, "batch=0"), (2, -1, "image=-1")])
def test_resnet_training_batch_rejects_bad_sizes(batch: int, image: int, name: str) -> None:
    with pytest.raises(ValueError, match=name) as error:
        resnet.training_batch(batch, image, seed=0)
    _one_line(error)


# BERT ---------------------------------------------------------------------------------------------

TINY = bert.BertConfig(vocab_size=50, hidden=16, layers=2, heads=4, intermediate=32, max_positions=20)


def _expected_encoder_parameters(config: bert.BertConfig) -> int:
    """Embeddings plus encoder layers, from BERT's layout (no pooler)."""
    h, i = config.hidden, config.intermediate
    embeddings = (config.vocab_size + config.max_positions + config.type_vocab) * h + 2 * h
    attention = 4 * (h * h + h) + 2 * h
    feed_forward = (h * i + i) + (i * h + h) + 2 * h
    return embeddings + config.layers * (attention + feed_forward)


def _expected_head_parameters(config: bert.BertConfig) -> int:
    """Dense, LayerNorm and the decoder's bias: the decoder's weight is the word embedding's."""
    h = config.hidden
    return (h * h + h) + 2 * h + config.vocab_size


def test_bert_base_matches_the_published_architecture() -> None:
    model = bert.build(bert.BERT_BASE)
    encoder = bert.parameter_count(model.bert)
    assert encoder == _expected_encoder_parameters(bert.BERT_BASE)
    # The published "110M" counts BERT's pooler (dense hidden -> hidden) too, which pre-training by
    # masked LM alone does not use: 109,482,240 with it.
    pooler = 768 * 768 + 768
    assert encoder + pooler == 109_482_240
    assert bert.parameter_count(model) == encoder + _expected_head_parameters(bert.BERT_BASE)


@pytest.mark.parametrize("config", [bert.BERT_STUDY, TINY])
def test_bert_parameter_count_follows_the_config(config: bert.BertConfig) -> None:
    model = bert.build(config)
    assert bert.parameter_count(model.bert) == _expected_encoder_parameters(config)
    assert bert.parameter_count(model) == _expected_encoder_parameters(config) + _expected_head_parameters(
        config
    )


def test_bert_decoder_is_tied_to_the_word_embedding() -> None:
    model = bert.build(TINY)
    assert model.head.decoder.weight is model.bert.embeddings.word.weight


def test_bert_logits_shape_and_eval_determinism() -> None:
    model = bert.build(TINY, seed=0)
    assert model.training
    input_ids, _ = bert.training_batch(TINY, batch=3, seq=7, seed=0)
    model.eval()
    with torch.no_grad():
        first = model(input_ids)
        second = model(input_ids)
    assert first.shape == (3, 7, TINY.vocab_size)
    assert torch.equal(first, second)


def test_bert_token_types_change_the_output() -> None:
    model = bert.build(TINY).eval()
    input_ids, _ = bert.training_batch(TINY, batch=1, seq=5, seed=0)
    with torch.no_grad():
        default = model(input_ids)
        zeros = model(input_ids, torch.zeros_like(input_ids))
        ones = model(input_ids, torch.ones_like(input_ids))
    assert torch.equal(default, zeros)
    assert not torch.allclose(default, ones)


def test_bert_attention_mixes_positions() -> None:
    model = bert.build(TINY).eval()
    input_ids, _ = bert.training_batch(TINY, batch=1, seq=6, seed=0)
    changed = input_ids.clone()
    changed[0, 5] = (changed[0, 5] + 1) % TINY.vocab_size
    with torch.no_grad():
        before, after = model(input_ids), model(changed)
    # Changing the last token changes the first position's logits only through attention.
    assert not torch.allclose(before[0, 0], after[0, 0])


def test_bert_training_steps_lower_the_mlm_loss() -> None:
    config = bert.BertConfig(
        vocab_size=50, hidden=32, layers=2, heads=4, intermediate=64, max_positions=16, dropout=0.0
    )
    model = bert.build(config, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    input_ids, labels = bert.training_batch(config, batch=4, seq=16, seed=0)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = bert.mlm_loss(model(input_ids), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_mlm_loss_averages_the_labelled_positions_only() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn((2, 3, 5), generator=generator)
    labels = torch.tensor([[1, -100, 4], [-100, -100, 0]])
    expected = (
        functional.cross_entropy(logits[0, 0:1], labels[0, 0:1])
        + functional.cross_entropy(logits[0, 2:3], labels[0, 2:3])
        + functional.cross_entropy(logits[1, 2:3], labels[1, 2:3])
    ) / 3
    assert torch.allclose(bert.mlm_loss(logits, labels), expected)


def test_mlm_loss_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3, 5\).*\(2, 4\)") as error:
        bert.mlm_loss(torch.zeros((2, 3, 5)), torch.zeros((2, 4), dtype=torch.int64))
    _one_line(error)


def test_bert_training_batch_labels_fifteen_percent_with_their_tokens() -> None:
    torch.manual_seed(5)
    before = torch.get_rng_state()
    input_ids, labels = bert.training_batch(bert.BERT_BASE, batch=8, seq=128, seed=0)
    assert torch.equal(torch.get_rng_state(), before)
    assert input_ids.shape == labels.shape == (8, 128)
    assert input_ids.dtype == labels.dtype == torch.int64
    assert int(input_ids.min()) >= 0
    assert int(input_ids.max()) < bert.BERT_BASE.vocab_size
    labelled = labels != bert.IGNORE_INDEX
    assert labelled.sum(dim=1).tolist() == [round(0.15 * 128)] * 8
    assert torch.equal(labels[labelled], input_ids[labelled])
    # Different rows pick different positions.
    assert not all(torch.equal(labelled[0], labelled[row]) for row in range(1, 8))
    again = bert.training_batch(bert.BERT_BASE, batch=8, seq=128, seed=0)
    other = bert.training_batch(bert.BERT_BASE, batch=8, seq=128, seed=1)
    assert torch.equal(labels, again[1])
    assert torch.equal(input_ids, again[0])
    assert not torch.equal(labels, other[1])


def test_bert_training_batch_labels_a_position_of_a_short_sequence() -> None:
    _, labels = bert.training_batch(TINY, batch=4, seq=2, seed=0)
    assert ((labels != bert.IGNORE_INDEX).sum(dim=1) == 1).all()


@pytest.mark.parametrize(("batch", "seq", "name"), [(0, 8, "batch=0"), (2, 21, "seq=21"), (2, 0, "seq=0")])
def test_bert_training_batch_rejects_bad_sizes(batch: int, seq: int, name: str) -> None:
    with pytest.raises(ValueError, match=name) as error:
        bert.training_batch(TINY, batch, seq, seed=0)
    _one_line(error)


@pytest.mark.parametrize(
    ("fields", "name"),
    [({"heads": 5}, "heads=5"), ({"layers": 0}, "layers=0"), ({"dropout": 1.0}, "dropout=1.0")],
)
def test_bert_config_rejects_impossible_sizes(fields: dict[str, Any], name: str) -> None:
    sizes: dict[str, Any] = {
        "vocab_size": 50,
        "hidden": 16,
        "layers": 2,
        "heads": 4,
        "intermediate": 32,
        "max_positions": 20,
    }
    with pytest.raises(ValueError, match=name) as error:
        bert.BertConfig(**{**sizes, **fields})
    _one_line(error)


# Digits -------------------------------------------------------------------------------------------


class _Step:
    """A plain eager training step with the interface the digits runs use."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss: Callable[..., torch.Tensor],
        optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.model = model
        self.loss = loss
        self.optimizer = optimizer(model.parameters())
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> float:
        self.batches.append((x, y))
        self.model.train()
        self.optimizer.zero_grad()
        loss = self.loss(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def evaluate(self, x: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        with torch.no_grad():
            out: torch.Tensor = self.model(x)
        return out


def _factory(model: Any, loss: Any, optimizer: Any, example: tuple[torch.Tensor, ...]) -> _Step:
    return _Step(model, loss, optimizer)


@pytest.fixture(scope="module")
def digits_data() -> Any:
    """The digits split with seed 0, loaded once."""
    pytest.importorskip("sklearn")
    from benchmarks.models import digits

    return digits.load()


def test_digits_load_is_a_deterministic_stratified_standardised_split(digits_data: Any) -> None:
    from benchmarks.models import digits

    data = digits_data
    assert data.train_x.shape == (1437, 64)
    assert data.test_x.shape == (360, 64)
    assert data.train_x.dtype == data.test_x.dtype == torch.float32
    assert data.train_y.dtype == data.test_y.dtype == torch.int64
    again = digits.load()
    for name in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(data, name), getattr(again, name))
    assert not torch.equal(digits.load(seed_split=1).test_x, data.test_x)
    # Stratified: every digit has 35 to 37 of the 360 held-out images (178 +/- 4 of each in all).
    counts = torch.bincount(data.test_y, minlength=10)
    assert counts.min() >= 35
    assert counts.max() <= 37
    # Standardised with the training images' statistics: centred and unit spread there (blank pixels
    # stay 0), but not exactly so on the held-out images.
    spread = data.train_x.std(dim=0, unbiased=False)
    varying = spread > 0
    assert torch.allclose(data.train_x.mean(dim=0), torch.zeros(64), atol=1e-5)
    assert torch.allclose(spread[varying], torch.ones(int(varying.sum())), atol=1e-4)
    assert (data.train_x[:, ~varying] == 0).all()
    assert torch.isfinite(data.test_x).all()
    assert not torch.allclose(data.test_x.mean(dim=0), torch.zeros(64), atol=1e-3)


@pytest.mark.parametrize("seed", [0, 1])
def test_digits_run_reaches_95_percent_held_out(digits_data: Any, seed: int) -> None:
    from benchmarks.models import digits

    run = digits.make_run(_factory, digits_data, seed=seed, batch=digits.BATCH)
    accuracies = []
    for _ in range(30):
        assert run.train_epoch() == run.steps_per_epoch * digits.BATCH
        accuracies.append(run.evaluate())
        if accuracies[-1] >= 0.95:
            break
    assert accuracies[-1] >= 0.95, accuracies


def test_digits_untrained_model_is_near_chance(digits_data: Any) -> None:
    from benchmarks.models import digits

    run = digits.make_run(_factory, digits_data, seed=0, batch=digits.BATCH)
    assert run.evaluate() < 0.5


def _run(data: Any, seed: int, batch: int, rank: int = 0, world_size: int = 1) -> Any:
    """A digits run around a fresh stand-in step."""
    from benchmarks.models import digits

    step = _Step(digits.mlp(seed), functional.cross_entropy, digits.optimizer)
    return digits.DigitsRun(step, data, seed=seed, batch=batch, rank=rank, world_size=world_size)


def _lists(batches: list[torch.Tensor]) -> list[list[int]]:
    return [b.tolist() for b in batches]


def test_digits_shards_of_two_ranks_are_disjoint_and_cover_the_epoch(digits_data: Any) -> None:
    ranks = [_run(digits_data, seed=7, batch=32, rank=r, world_size=2) for r in (0, 1)]
    single = _run(digits_data, seed=7, batch=32)
    for epoch in (0, 1):
        shards = [torch.cat(run.shard(epoch)).tolist() for run in ranks]
        # The same number of steps on every rank, or a distributed step would wait forever.
        assert len(ranks[0].shard(epoch)) == len(ranks[1].shard(epoch)) == ranks[0].steps_per_epoch
        assert not set(shards[0]) & set(shards[1])
        covered = set(shards[0]) | set(shards[1])
        assert len(covered) == len(shards[0]) + len(shards[1])
        # Only the tail of fewer than batch x world_size images is left out of the epoch.
        assert 1437 - 2 * 32 < len(covered) <= 1437
        # The ranks share one permutation: the single-process run's batches, dealt out in turn.
        one = _lists(single.shard(epoch))
        for rank, run in enumerate(ranks):
            assert one[rank::2] == _lists(run.shard(epoch))
    assert _lists(ranks[0].shard(0)) != _lists(ranks[0].shard(1))


def test_digits_shards_cover_every_image_when_batches_divide_the_set(digits_data: Any) -> None:
    # 1437 = 3 x 479: three ranks of one 479-image batch each cover the training set exactly once.
    runs = [_run(digits_data, seed=0, batch=479, rank=r, world_size=3) for r in range(3)]
    indices = sorted(i for run in runs for i in torch.cat(run.shard(0)).tolist())
    assert indices == list(range(1437))


def test_digits_train_epoch_feeds_the_shards_rows(digits_data: Any) -> None:
    from benchmarks.models import digits

    run = digits.make_run(_factory, digits_data, seed=2, batch=16, rank=1, world_size=2)
    step = run.step
    assert isinstance(step, _Step)
    expected = run.shard(0)
    assert run.train_epoch() == len(expected) * 16
    assert len(step.batches) == len(expected)
    for (x, y), indices in zip_strict(step.batches, expected):
        assert torch.equal(x, digits_data.train_x[indices])
        assert torch.equal(y, digits_data.train_y[indices])
    assert run.epochs == 1
    assert run.shard(1)[0].tolist() != expected[0].tolist()


def test_digits_same_seed_same_run_other_seed_other_run(digits_data: Any) -> None:
    from benchmarks.models import digits

    def accuracy_after_one_epoch(seed: int) -> float:
        run = digits.make_run(_factory, digits_data, seed=seed, batch=32)
        run.train_epoch()
        return run.evaluate()

    assert accuracy_after_one_epoch(3) == accuracy_after_one_epoch(3)
    first = digits.make_run(_factory, digits_data, seed=3, batch=32).shard(0)
    other = digits.make_run(_factory, digits_data, seed=4, batch=32).shard(0)
    assert first[0].tolist() != other[0].tolist()


@pytest.mark.parametrize(
    ("rank", "world_size", "names"),
    [(2, 2, ["rank=2", "world_size=2"]), (-1, 2, ["rank=-1"]), (0, 0, ["world_size=0"])],
)
def test_digits_run_rejects_a_wrong_rank(
    digits_data: Any, rank: int, world_size: int, names: list[str]
) -> None:
    from benchmarks.models import digits

    def factory(*args: Any) -> Any:
        pytest.fail("the step is built only for a valid rank")

    with pytest.raises(ValueError, match=names[0]) as error:
        digits.make_run(factory, digits_data, seed=0, batch=32, rank=rank, world_size=world_size)
    for name in names:
        assert name in _one_line(error)
    with pytest.raises(ValueError, match=names[0]):
        _run(digits_data, seed=0, batch=32, rank=rank, world_size=world_size)


@pytest.mark.parametrize(
    ("batch", "seed", "name"), [(0, 0, "batch=0"), (800, 0, "batch=800"), (8, -1, "seed=-1")]
)
def test_digits_run_rejects_bad_batch_and_seed(digits_data: Any, batch: int, seed: int, name: str) -> None:
    from benchmarks.models import digits

    with pytest.raises(ValueError, match=name) as error:
        digits.make_run(_factory, digits_data, seed=seed, batch=batch, world_size=2)
    _one_line(error)


def test_digits_accuracy_counts_the_top_class_and_rejects_mismatched_shapes() -> None:
    from benchmarks.models import digits

    logits = torch.tensor([[0.0, 2.0], [3.0, 1.0], [0.0, 1.0], [5.0, 4.0]])
    assert digits.accuracy(logits, torch.tensor([1, 0, 0, 1])) == 0.5
    with pytest.raises(ValueError, match=r"\(4, 2\).*\(3,\)") as error:
        digits.accuracy(logits, torch.tensor([1, 0, 0]))
    _one_line(error)


def test_digits_evaluate_needs_a_step_that_can_evaluate(digits_data: Any) -> None:
    from benchmarks.models import digits

    class _InferenceOnly(_Step):
        evaluate = None  # type: ignore[assignment]

    def factory(model: Any, loss: Any, optimizer: Any, example: tuple[torch.Tensor, ...]) -> _Step:
        return _InferenceOnly(model, loss, optimizer)

    run = digits.make_run(factory, digits_data, seed=0, batch=32)
    with pytest.raises(TypeError, match="_InferenceOnly has no evaluate"):
        run.evaluate()
