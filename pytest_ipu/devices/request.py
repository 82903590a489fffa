"""What a test asks for: ``instances`` copies of a model, each spanning ``stages x replicas`` IPUs.

The marker's placement keywords become a ``DeviceRequest``; ``allocate`` then gives each instance
its IPU ids. Graphcore's ResNeXt-101 study (several independent single-IPU sessions on C2 boards)
is ``instances=N`` with one IPU each. Pure: no pytest, no SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The marker keywords ``parse_request`` reads; the marker owns the whitelist of the others.
KEYWORDS = ("ipus", "replicas", "stages", "instances")

#: The largest multi-IPU device (an IPU-POD64 partition); no single instance can span more.
MAX_IPUS_PER_INSTANCE = 64
#: Most concurrent instances: one per IPU of the largest partition. Each is a thread or a worker
#: process with its own compiled model; past this a value is a typo, not a plan.
MAX_INSTANCES = 64


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is 1, 2, 4, 8, ...: the sizes multi-IPU devices come in."""
    return n > 0 and n & (n - 1) == 0


def _round_up_to_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class DeviceRequest:
    """What one test asks for: ``instances`` copies of a model, each on ``ipus_per_instance`` IPUs.

    ``ipus_per_instance`` is ``stages x replicas``, a power of two of at most 64. Build it with
    ``parse_request`` for messages that name the marker keyword; constructing it directly checks
    the same rules.
    """

    ipus_per_instance: int = 1
    replicas: int = 1
    stages: int = 1
    instances: int = 1

    def __post_init__(self) -> None:
        source = "DeviceRequest"
        for name in ("ipus_per_instance", "replicas", "stages", "instances"):
            _positive_int(name, getattr(self, name), source)
        _check_instances(self.instances, source)
        product = self.stages * self.replicas
        if self.ipus_per_instance != product:
            raise ValueError(
                f"{source}: invalid ipus_per_instance={self.ipus_per_instance}: stages x replicas is "
                f"{self.stages} x {self.replicas} = {product}; build requests with parse_request()"
            )
        _check_size(
            self.ipus_per_instance,
            f"ipus_per_instance={self.ipus_per_instance}",
            source,
            self.stages,
            self.replicas,
        )


def parse_request(mapping: Mapping[str, object], source: str) -> DeviceRequest:
    """Build a ``DeviceRequest`` from the marker keywords ``ipus``, ``replicas``, ``stages``, ``instances``.

    Each is a positive int and defaults to 1, except ``ipus``, which defaults to
    ``stages x replicas`` and must equal it when given. An instance's IPU count must be a power of two
    of at most 64, and there are at most 64 instances. Other keys are ignored. Raises ``ValueError``
    naming the keyword, the value, ``source`` (say, the node id) and the fix.
    """
    stages = _positive(mapping, "stages", source)
    replicas = _positive(mapping, "replicas", source)
    instances = _positive(mapping, "instances", source)
    _check_instances(instances, source)
    product = stages * replicas
    if "ipus" in mapping:
        ipus = _positive(mapping, "ipus", source)
        if ipus != product:
            raise ValueError(
                f"{source}: invalid ipus={ipus}: stages x replicas is {stages} x {replicas} = "
                f"{ipus_text(product)} per instance; write ipus={product} or leave ipus out"
            )
        asked = f"ipus={ipus}"
    else:
        asked = f"stages={stages}, replicas={replicas}"
    _check_size(product, asked, source, stages, replicas)
    return DeviceRequest(product, replicas, stages, instances)


def _positive(mapping: Mapping[str, object], name: str, source: str) -> int:
    return _positive_int(name, mapping.get(name, 1), source)


def _positive_int(name: str, value: object, source: str) -> int:
    # bool is an int subclass, but ipus=True is a mistake, not a request for one IPU.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{source}: invalid {name}={value!r}: expected a positive int, got "
            f"{type(value).__name__}; write a number such as {name}=1"
        )
    if value < 1:
        raise ValueError(
            f"{source}: invalid {name}={value!r}: expected a positive int; write {name}=1 or more"
        )
    return value


def _check_instances(instances: int, source: str) -> None:
    if instances > MAX_INSTANCES:
        raise ValueError(
            f"{source}: invalid instances={instances}: expected 1 to {MAX_INSTANCES} (one per IPU of the "
            f"largest multi-IPU device); write instances={MAX_INSTANCES} or fewer"
        )


def _check_size(ipus: int, asked: str, source: str, stages: int, replicas: int) -> None:
    if ipus > MAX_IPUS_PER_INSTANCE:
        raise ValueError(
            f"{source}: invalid {asked}: {ipus} IPUs per instance, more than the "
            f"{MAX_IPUS_PER_INSTANCE} of the largest multi-IPU device; use fewer stages x replicas "
            "per instance and more instances"
        )
    if not is_power_of_two(ipus):
        raise ValueError(
            f"{source}: invalid {asked}: {ipus} IPUs per instance is not a power of two, the only "
            f"sizes multi-IPU devices come in; {_power_of_two_advice(stages, replicas)}"
        )


def _power_of_two_advice(stages: int, replicas: int) -> str:
    """A fix for a non-power-of-two ``stages x replicas`` that changes one keyword to a value that
    works: stages=3 -> ``stages=2 or stages=4``. (Reserving idle IPUs to round up, PopTorch's
    ``auto_round_num_ipus``, is not offered: the marker does not take it.)"""
    if is_power_of_two(replicas):
        name, value, other = "stages", stages, replicas
    else:
        name, value, other = "replicas", replicas, stages
    if not is_power_of_two(other):
        up = _round_up_to_power_of_two(stages)
        return f"make stages and replicas powers of two, e.g. stages={up}, replicas=1"
    # Both fit in 64: the product is at most 64 and `other` a power of two, so rounding `value` up to a
    # power of two stays within 64 / other.
    up = _round_up_to_power_of_two(value)
    return f"make stages x replicas a power of two: write {name}={up // 2} or {name}={up}"


def ipus_text(n: int) -> str:
    """``1 IPU``, ``4 IPUs``."""
    return "1 IPU" if n == 1 else f"{n} IPUs"
