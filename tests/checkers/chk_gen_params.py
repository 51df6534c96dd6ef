"""The parameters of chk_gen's simulated histories: a hypothesis strategy
(``params``) and the same distribution from a plain RNG (``random_params``,
for long runs). What each one means is chk_gen's docstring."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st


@dataclass(frozen=True)
class Params:
    seed: int
    partitions: int
    clients: int
    steps: int
    mode: str            # "assign" | "subscribe"
    drain: bool
    p_fail: float
    p_info: float
    mixed: bool = False       # info sends may have mixed per-message outcomes
    retention: bool = False   # the log start moves (reads start above 0)
    drain_info: bool = False  # the final drain stops short (its last op is info)
    meta: bool = False        # a metadata log and replica listings come with the run
    elr: bool = False         # with meta: ELR elections happen
    pipelined: bool = False   # pipelined producers send too (one message per op, "producer" field)


@st.composite
def params(draw: Any, meta: bool | None = False, drain: bool | None = None,
           drain_info: bool | None = None) -> Params:
    """None draws a feature; True/False forces it."""
    def pick(forced: bool | None) -> bool:
        return draw(st.booleans()) if forced is None else forced
    m = pick(meta)
    d = pick(drain)
    return Params(seed=draw(st.integers(0, 2**32 - 1)), partitions=draw(st.integers(1, 3)),
                  clients=draw(st.integers(1, 4)), steps=draw(st.integers(0, 80)),
                  mode=draw(st.sampled_from(["assign", "assign", "subscribe"])),
                  drain=d, p_fail=draw(st.sampled_from([0.0, 0.1])),
                  p_info=draw(st.sampled_from([0.0, 0.1, 0.3])), mixed=draw(st.booleans()),
                  retention=draw(st.booleans()), drain_info=d and pick(drain_info),
                  meta=m, elr=m and draw(st.booleans()), pipelined=draw(st.booleans()))


def random_params(rng: random.Random, meta: bool | None = None) -> Params:
    """The same distribution as ``params(meta=None, ...)``, from a plain RNG (long runs)."""
    m = rng.random() < 0.5 if meta is None else meta
    d = rng.random() < 0.6
    return Params(seed=rng.randrange(2**32), partitions=rng.randint(1, 3), clients=rng.randint(1, 4),
                  steps=rng.randint(0, 80), mode=rng.choice(["assign", "assign", "subscribe"]),
                  drain=d, p_fail=rng.choice([0.0, 0.1]), p_info=rng.choice([0.0, 0.1, 0.3]),
                  mixed=rng.random() < 0.5, retention=rng.random() < 0.5,
                  drain_info=d and rng.random() < 0.25, meta=m, elr=m and rng.random() < 0.5,
                  pipelined=rng.random() < 0.5)
