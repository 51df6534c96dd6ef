"""The protocol proxy's rules: what to match, what to do, when to trigger
(docs/design.md, "Faults inside Kafka's protocol"). Pure: parsing,
validation and the seeded trigger decision; the proxy (nemesis.kafka_proxy)
does the I/O.

A rule, as written in ``[[nemesis.proxy]]`` tables of a run config::

    api = "EndTxn"                 # an API name (nemesis.proxy_wire.API_KEYS)
    action = "hold"                # delay-request | delay-response | late-response | hold |
                                   # drop-response | close | error-response
    broker = ["n1"]                # optional: only requests to these brokers
    client_id = "kchaos-*"         # optional glob on the request header's client id
    transactional_id = "*"         # optional glob; transaction APIs only
    committed = true               # optional, EndTxn only: commits (true) or aborts (false)
    partition = [0, 2]             # optional, Produce only: any of these partitions
    delay_ms = 2000                # delay-request, delay-response, late-response
    until = "next-produce"         # hold: the event that releases the request
    max_hold_ms = 30000            # hold: released after this long whatever happens
    error = "NOT_COORDINATOR"      # error-response: the retriable error answered
    nth = 3 | every = 5 | probability = 0.3 | window_s = [10, 90] | limit = 20

Actions: ``delay-request`` and ``delay-response`` hold the connection's
stream (its order kept: later requests and responses wait behind it);
``late-response`` forwards the request and delivers its response ``delay_ms``
late while the connection's later responses pass it: a Kafka broker answers
a connection's requests in order and a network cannot reorder one TCP
stream, so this is a fault no network makes; it is how the client sees one
request time out in flight while the ones sent after it succeed (a client
that checks response order, as Java's does, drops the connection instead);
``hold`` takes the request off its connection, closes the client's side (the
client sees a broken connection and retries on a new one) and sends the
request to the broker on the old connection when ``until`` happens or
``max_hold_ms`` passes, whichever first: a request delayed in the network
past its connection; ``drop-response`` forwards the request, then drops its
response and closes the connection (applied, never heard); ``close`` closes
the connection before the request is forwarded (never applied);
``error-response`` answers the request itself with a retriable ``error``
(nemesis.proxy_wire.RETRIABLE_ERRORS) and never forwards it (never applied,
heard as refused), for the APIs whose answer is an error code and nothing
that echoes the request (EndTxn, AddOffsetsToTxn, InitProducerId).

Hold events, per transactional id, counted from the moment of the hold:
``txn-end`` (an EndTxn of that id answered), ``next-produce`` (a Produce of
that id answered and not refused on every partition: the next transaction
has written), ``next-add-partitions``
(an AddPartitionsToTxn of that id answered).

Triggers, all of which must agree: ``nth`` (only the nth match), ``every``
(every kth match), ``probability`` (a seeded draw per match), ``window_s``
(seconds since the rules were armed), ``limit`` (at most this many triggers).
A hold is not re-triggered for a transactional id that has one held already.
"""
from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from infra.errors import UsageError
from nemesis.proxy_wire import (API_KEYS, ERROR_ANSWERABLE, RETRIABLE_ERRORS, TRANSACTIONAL_APIS, RequestFields,
                                RequestHeader)

ACTIONS = ("delay-request", "delay-response", "late-response", "hold", "drop-response", "close", "error-response")
DELAYING = frozenset({"delay-request", "delay-response", "late-response"})  # the actions that take delay_ms
HOLD_EVENTS: dict[str, str] = {"txn-end": "EndTxn", "next-produce": "Produce",
                               "next-add-partitions": "AddPartitionsToTxn"}
KEYS = frozenset({"api", "action", "broker", "client_id", "transactional_id", "committed", "partition",
                  "delay_ms", "until", "max_hold_ms", "nth", "every", "probability", "window_s", "limit",
                  "name", "error"})


@dataclass(frozen=True)
class Rule:
    name: str
    api: str
    action: str
    brokers: tuple[str, ...] = ()
    client_id: str | None = None
    transactional_id: str | None = None
    committed: bool | None = None
    partitions: tuple[int, ...] = ()
    delay_ms: float = 0.0
    until: str | None = None
    max_hold_ms: float | None = None
    nth: int | None = None
    every: int | None = None
    probability: float = 1.0
    window_s: tuple[float, float] | None = None
    limit: int | None = None
    error_code: int | None = None  # error-response

    @property
    def needs_body(self) -> bool:
        """Whether matching or the action needs the request's body decoded."""
        return (self.api in TRANSACTIONAL_APIS)

    def describe(self) -> dict[str, Any]:
        return {"rule": self.name, "api": self.api, "action": self.action}


def _fail(where: str, text: str) -> UsageError:
    return UsageError(f"{where}: {text}")


def _number(where: str, raw: Mapping[str, Any], key: str, lo: float, kind: type = float) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise _fail(where, f"{key} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if value < lo:
        raise _fail(where, f"{key} must be at least {lo:g}, got {value!r}")
    return kind(value)


def _error_code(where: str, raw: Mapping[str, Any], api: str, action: str) -> int | None:
    error = raw.get("error")
    if action != "error-response":
        if error is not None:
            raise _fail(where, f"error applies to error-response only, not {action}")
        return None
    if api not in ERROR_ANSWERABLE:
        raise _fail(where, f"error-response cannot answer {api} (it can answer {', '.join(ERROR_ANSWERABLE)})")
    if error not in RETRIABLE_ERRORS:
        raise _fail(where, f"error-response needs error, one of {', '.join(RETRIABLE_ERRORS)}; got {error!r}")
    return RETRIABLE_ERRORS[error]


def parse_rule(raw: Mapping[str, Any], index: int) -> Rule:
    """One rule from its table; UsageError (one line naming the bad key) otherwise."""
    where = f"[[nemesis.proxy]] rule {index + 1}"
    if not isinstance(raw, Mapping):
        raise _fail(where, "a rule is a table of keys")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(KEYS))}")
    api, action = raw.get("api"), raw.get("action")
    if api not in API_KEYS:
        raise _fail(where, f"unknown API {api!r}; valid APIs: {', '.join(API_KEYS)}")
    if action not in ACTIONS:
        raise _fail(where, f"unknown action {action!r}; valid actions: {', '.join(ACTIONS)}")
    brokers = raw.get("broker", ())
    brokers = (brokers,) if isinstance(brokers, str) else tuple(brokers)
    partitions = raw.get("partition", ())
    partitions = (partitions,) if isinstance(partitions, int) else tuple(partitions)
    if raw.get("transactional_id") is not None and api not in TRANSACTIONAL_APIS:
        raise _fail(where, f"{api} carries no transactional id (those that do: {', '.join(sorted(TRANSACTIONAL_APIS))})")
    if raw.get("committed") is not None and (api != "EndTxn" or not isinstance(raw["committed"], bool)):
        raise _fail(where, "committed (true or false) applies to EndTxn only")
    if partitions and (api != "Produce" or not all(isinstance(p, int) and p >= 0 for p in partitions)):
        raise _fail(where, "partition (partition numbers) applies to Produce only")
    delay_ms = _number(where, raw, "delay_ms", 0) or 0.0
    if action in DELAYING and delay_ms <= 0:
        raise _fail(where, f"{action} needs delay_ms above 0")
    until, max_hold = raw.get("until"), _number(where, raw, "max_hold_ms", 1)
    if action == "hold":
        if until is None and max_hold is None:
            raise _fail(where, "hold needs until (an event) or max_hold_ms, or both")
        if until is not None and until not in HOLD_EVENTS:
            raise _fail(where, f"unknown hold event {until!r}; valid events: {', '.join(HOLD_EVENTS)}")
        if until is not None and api not in TRANSACTIONAL_APIS:
            raise _fail(where, f"hold until {until!r} can never happen for {api}: it names no transaction "
                               f"(holds on an event take {', '.join(sorted(TRANSACTIONAL_APIS))})")
        if until == "txn-end" and api == "InitProducerId":
            raise _fail(where, "hold until 'txn-end' can never happen for InitProducerId: the held request "
                               "begins the producer, no transaction of it can end before it is answered")
    elif until is not None or max_hold is not None:
        raise _fail(where, f"until and max_hold_ms apply to hold only, not {action}")
    error_code = _error_code(where, raw, api, action)
    probability = _number(where, raw, "probability", 0)
    if probability is not None and probability > 1:
        raise _fail(where, f"probability must be between 0 and 1, got {probability!r}")
    window = raw.get("window_s")
    if window is not None:
        if (not isinstance(window, Sequence) or len(window) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in window)
                or not 0 <= window[0] < window[1]):
            raise _fail(where, f"window_s must be [start, end] seconds with 0 <= start < end, got {window!r}")
        window = (float(window[0]), float(window[1]))
    return Rule(name=str(raw.get("name") or f"rule-{index + 1}"), api=api, action=action, brokers=brokers,
                client_id=raw.get("client_id"), transactional_id=raw.get("transactional_id"),
                committed=raw.get("committed"), partitions=partitions, delay_ms=float(delay_ms), until=until,
                max_hold_ms=max_hold, nth=_number(where, raw, "nth", 1, int),
                every=_number(where, raw, "every", 1, int),
                probability=1.0 if probability is None else probability, window_s=window,
                limit=_number(where, raw, "limit", 1, int), error_code=error_code)


def parse_rules(raw: Any) -> list[Rule]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise UsageError("[nemesis] proxy must be an array of rule tables ([[nemesis.proxy]])")
    return [parse_rule(r, i) for i, r in enumerate(raw)]


def brokers_impaired(rules: Sequence[Rule], n: int) -> int:
    """An upper bound on the brokers whose client traffic ``rules`` may impair
    (of ``n``), for the fault budget (nemesis.budget): the brokers a rule
    names, else any of them; a rule that acts on one request (``nth``) or on
    ``limit`` requests reaches at most that many brokers; one that never
    fires (``probability`` 0) none. Counted as if the rules hit different
    brokers, as the budget counts faults."""
    named: set[str] = set()
    unnamed = 0
    for rule in rules:
        if rule.probability == 0:
            continue
        acts = 1 if rule.nth is not None else rule.limit  # requests it may act on; None: no bound
        reach = len(set(rule.brokers)) or n
        if rule.brokers and (acts is None or acts >= reach):
            named |= set(rule.brokers)
        else:
            unnamed += reach if acts is None else min(acts, reach)
    return min(n, len(named) + unnamed)


def matches(rule: Rule, broker: str, header: RequestHeader, fields: RequestFields) -> bool:
    """Whether ``rule`` applies to this request (its trigger aside)."""
    if header.api != rule.api or (rule.brokers and broker not in rule.brokers):
        return False
    if rule.client_id is not None and not fnmatch.fnmatchcase(header.client_id or "", rule.client_id):
        return False
    if rule.transactional_id is not None and (
            fields.transactional_id is None or not fnmatch.fnmatchcase(fields.transactional_id, rule.transactional_id)):
        return False
    if rule.committed is not None and fields.committed is not rule.committed:
        return False
    if rule.partitions and not set(rule.partitions) & set(fields.partitions):
        return False
    if rule.action == "hold" and rule.until is not None and fields.transactional_id is None:
        return False  # nothing could release it
    return True


@dataclass
class Trigger:
    """A rule's match count, trigger count and seeded draws."""

    rule: Rule
    rng: random.Random
    matched: int = 0
    fired: int = 0

    def fires(self, elapsed_s: float) -> bool:
        """Count one match; True when the rule acts on it."""
        self.matched += 1
        rule = self.rule
        if rule.window_s is not None and not rule.window_s[0] <= elapsed_s < rule.window_s[1]:
            return False
        if rule.nth is not None and self.matched != rule.nth:
            return False
        if rule.every is not None and self.matched % rule.every:
            return False
        if rule.limit is not None and self.fired >= rule.limit:
            return False
        if rule.probability < 1.0 and self.rng.random() >= rule.probability:
            return False
        self.fired += 1
        return True


@dataclass
class RuleSet:
    """The armed rules of one proxy; the first rule that matches and fires acts."""

    rules: list[Rule]
    seed: int
    triggers: list[Trigger] = field(init=False)

    def __post_init__(self) -> None:
        self.triggers = [Trigger(r, random.Random(f"kchaos-proxy:{self.seed}:{i}")) for i, r in enumerate(self.rules)]
        # The API keys of the requests to read whole: those a rule may act on
        # and those whose answers may release a hold. Every other request only
        # passes (its header's rule-relevant fields would match no rule).
        self.read_keys = frozenset(API_KEYS[r.api] for r in self.rules) | frozenset(
            API_KEYS[HOLD_EVENTS[r.until]] for r in self.rules if r.action == "hold" and r.until is not None)

    @property
    def needs_body(self) -> bool:
        return any(r.needs_body for r in self.rules)

    def decide(self, broker: str, header: RequestHeader, fields: RequestFields, elapsed_s: float) -> Rule | None:
        for trig in self.triggers:
            if matches(trig.rule, broker, header, fields) and trig.fires(elapsed_s):
                return trig.rule
        return None
