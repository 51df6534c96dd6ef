"""What differs between the Kafka releases kchaos runs: one table, one lookup.

Every choice kchaos makes by Kafka version reads ``features(version)``; no
other module compares version numbers. Each row says from which release on a
behaviour holds and why (the release or KIP), and was checked against the
jars from Maven Central (3.8.1, 3.9.2, 4.0.1, 4.1.1, 4.2.0, 4.3.0, 4.3.1).

What does *not* differ between 3.8.1 and 4.3.1, so has no row: static
KRaft voters (``controller.quorum.voters``; kchaos never uses KIP-853's
``controller.quorum.bootstrap.servers``, new in 3.9), ``kafka.tools.StorageTool
format -t ID -c CONFIG --ignore-formatted`` writing ``meta.properties``
(version 1, with ``directory.id``) and ``bootstrap.checkpoint``, the
``--cluster-metadata-decoder`` and ``--print-data-log`` flags of DumpLogSegments
and their output, ``kafka.server.KafkaConfig.configDef()`` and
``org.apache.kafka.storage.internals.log.LogConfig.configKeys()`` for the
settings check, the "Kafka Server started" log line, and the transaction state
log settings kchaos writes (``transaction.state.log.*``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Row:
    name: str
    since: Version   # the first release with this behaviour
    source: str      # the release note or KIP that says so
    effect: str      # what kchaos does about it


TABLE: tuple[Row, ...] = (
    Row("log4j2-only", (4, 0, 0),
        "Kafka 4.0 moved to log4j2 (KIP-653); 3.x's kafka-tools depends on "
        "kafka-log4j-appender, which brings slf4j-reload4j and reload4j (log4j 1)",
        "before 4.0 the Maven POM excludes org.slf4j:slf4j-reload4j (beside log4j-slf4j-impl it is "
        "a second SLF4J binding, it wins, and the broker then logs nowhere: no server.log, no "
        "\"Kafka Server started\") and ch.qos.reload4j:reload4j, and adds log4j2's log4j-1.2-api "
        "in their place: core's Log4jController calls the log4j 1 API, which then reaches log4j2"),
    Row("storage-features", (3, 9, 0),
        "KIP-1022 (3.9): StorageTool format checks each --feature against the features it knows "
        "and refuses the others (\"Unsupported feature: ...\"); 3.8's format applies "
        "metadata.version only and ignores every other --feature without a word",
        "before 3.9 a [broker_features] entry other than metadata.version is refused at config "
        "time (exit 64), since formatting would silently drop it; from 3.9 on Kafka's own refusal "
        "fails the cluster start"),
    Row("dynamic-quorum", (3, 9, 0),
        "KIP-853 (3.9): a dynamic KRaft quorum (StorageTool format --standalone / "
        "--initial-controllers / --no-initial-controllers, controller.quorum.bootstrap.servers, "
        "kafka-metadata-quorum add-controller and remove-controller)",
        'quorum = "dynamic" is refused (exit 64) before 3.9'),
    Row("eligible-leader-replicas", (4, 0, 0),
        "KIP-966: the eligible.leader.replicas.version feature (off by default in 4.0, on for "
        "new clusters from 4.1); 3.8 has no ELR and its metadata records no ELR fields",
        "readers of the metadata log treat absent ELR fields as no ELR; ELR scenarios need it"),
    Row("transaction-version-2", (4, 0, 0),
        "KIP-890 part 2: the transaction.version feature, level 2 on new clusters formatted by "
        "4.0+ (server-side defence against hanging and zombie transactions: the producer epoch "
        "is bumped at every transaction end); 3.8 has no such feature and 3.9 only level 0",
        "none in kchaos itself: it is why transaction findings may differ between 3.x and 4.x"),
    Row("share-groups", (4, 2, 0),
        "KIP-932 share groups are production-ready in 4.2: the share.version feature's level 1 "
        "(ShareVersion.LATEST_PRODUCTION, bootstrap metadata.version 4.2-IV0) is on for new "
        "clusters; 4.0 had them early access and 4.1 as a preview turned on by hand",
        'mode = "share" is refused (exit 64) before 4.2'),
    Row("dump-log-segments-in-tools", (4, 3, 0),
        "Kafka 4.3.0 moved DumpLogSegments from core (Scala, kafka.tools.DumpLogSegments; "
        "still there in 4.2.0) to the tools module (org.apache.kafka.tools.DumpLogSegments)",
        "broker.log_dump starts the class the node's Kafka has"),
)
_ROWS = {row.name: row for row in TABLE}

# The one feature StorageTool format applies before "storage-features".
LEGACY_STORAGE_FEATURES = frozenset({"metadata.version"})

_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def parse_version(version: str) -> Version:
    """``"3.8.1"`` -> (3, 8, 1); suffixes (``-rc1``) are ignored. ValueError if not a version."""
    m = _VERSION.match(version)
    if not m:
        raise ValueError(f"not a Kafka version: {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def has(version: str, name: str) -> bool:
    """Whether Kafka ``version`` has the behaviour of row ``name`` (KeyError for an unknown row)."""
    return parse_version(version) >= _ROWS[name].since


@dataclass(frozen=True)
class KafkaFeatures:
    """The table's answers for one Kafka version."""
    version: str

    @property
    def log4j2_only(self) -> bool:
        return has(self.version, "log4j2-only")

    @property
    def excluded_artifacts(self) -> tuple[str, ...]:
        """groupId:artifactId pairs kept off the classpath beyond Kafka Connect (see "log4j2-only")."""
        return () if self.log4j2_only else ("org.slf4j:slf4j-reload4j", "ch.qos.reload4j:reload4j")

    @property
    def log4j_artifacts(self) -> tuple[str, ...]:
        """log4j2 artifact ids added at kchaos's log4j2 version beyond the SLF4J binding and the core."""
        return () if self.log4j2_only else ("log4j-1.2-api",)

    @property
    def elr(self) -> bool:
        return has(self.version, "eligible-leader-replicas")

    @property
    def transaction_version_2(self) -> bool:
        return has(self.version, "transaction-version-2")

    @property
    def share_groups(self) -> bool:
        return has(self.version, "share-groups")

    @property
    def dump_log_segments_main(self) -> str:
        return ("org.apache.kafka.tools.DumpLogSegments" if has(self.version, "dump-log-segments-in-tools")
                else "kafka.tools.DumpLogSegments")

    def storage_feature_problem(self, feature: str) -> str | None:
        """Why ``--feature feature=...`` would not take effect at format, or None when
        StorageTool applies it or (3.9+) refuses it itself with its own list."""
        if has(self.version, "storage-features") or feature in LEGACY_STORAGE_FEATURES:
            return None
        why = {"eligible.leader.replicas.version": " (Eligible Leader Replicas, KIP-966, arrived in 4.0)",
               "transaction.version": " (transaction.version 2, KIP-890, arrived in 4.0)"}.get(feature, "")
        return (f"Kafka {self.version}'s storage format sets only metadata.version and would ignore "
                f"{feature}{why}")


def features(version: str) -> KafkaFeatures:
    parse_version(version)
    return KafkaFeatures(version)


def installed_version(jar_names: list[str]) -> str | None:
    """The Kafka version of a lib folder, from its ``kafka-clients-<version>.jar``."""
    for name in jar_names:
        m = re.fullmatch(r"kafka-clients-(\d+\.\d+\.\d+[^/]*)\.jar", name.rsplit("/", 1)[-1])
        if m:
            return m.group(1)
    return None
