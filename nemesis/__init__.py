"""Nemeses: faults injected into a running cluster, composed and scheduled.
Imports only broker, infra and history.ops (the history contract); never harness.

Everything goes through ``Node.run`` and the broker classes; nothing here
talks to Docker or SSH directly.

Modules: ``core`` (the Nemesis protocol, NemesisContext, composition, target
resolution), ``topology`` (pure networkx topologies, grudges, DROP rules),
``partition``, ``process`` (kill and pause), ``clock``, ``netem``, ``operations``
(planned leader moves), ``quorum`` (controllers removed and re-added), ``budget``
(the fault budget of plans), ``packages`` (fault packages, ``plan``,
``build_nemesis``, ``heal_all``), ``draws`` (what each package's start ops aim at), ``scenarios``. The
``kchaos nemesis`` command is ``harness.nemesis_cli``.

Op names (``f``), in start/stop pairs; every completed value carries
``fault`` (the package name) and ``nodes`` (node names acted on):

=================  ===========  ============================================================
op                 package      value (invoke -> completed "info")
=================  ===========  ============================================================
start-partition    partition    invoke: ``topology`` (isolate-node | isolate-leader |
                                isolate-controller | halves | majorities-ring | bridge |
                                one-way | client-cut-node | client-cut-leader |
                                client-only-leader) with ``node``/``node_index``
                                (isolate-node, client-cut-node; the
                                receiver for one-way, which also takes ``target`` keys as
                                kill does, plus optional ``from``, the senders),
                                ``partition``/``partition_index`` (isolate-leader,
                                client-cut-leader, client-only-leader), ``seed``
                                (halves, ring, bridge), optional ``ports`` (restrict every
                                rule to these destination ports, e.g. [9092]).
                                completed: ``nodes`` (nodes holding rules), ``grudge``
                                {node: [peers it drops]}, ``rules`` {node: [text]}, and
                                ``isolated``, ``partition``/``leader``, ``controller``,
                                ``groups``, ``sees``, ``bridge``, ``receiver``/``senders``,
                                ``cut``, ``client_reaches`` as the topology has them.
                                The unclean-election set-up (the leader stops hearing its
                                followers' replication fetches, controller traffic flows):
                                ``{"topology": "one-way", "target": "leader", "partition":
                                0, "ports": [9092]}``.
stop-partition     partition    ``nodes``: every node healed (KCHAOS chain removed).
kill               kill         invoke: ``target`` random | leader | controller | minority |
                                all | node | <node name>, ``node_index``, ``partition``/
                                ``partition_index`` (leader), ``seed``. completed: ``nodes``
                                SIGKILLed, ``target``, ``partition``/``leader``,
                                ``controller``.
start              kill         restarts the brokers kill killed (``target`` "all": every
                                broker not running). completed: ``nodes`` (ensured running),
                                ``restarted``.
pause              pause        like kill, with SIGSTOP.
resume             pause        SIGCONT to every broker. completed: ``nodes``, ``resumed``.
bump-clock         clock        invoke: target keys as kill, ``offset_s`` (the node's new
                                offset from true time, e.g. 3600 or -120). completed:
                                ``nodes``, ``offset_s``.
strobe-clock       clock        invoke: target keys, ``offsets_s`` [a, b], ``period_s``,
                                ``duration_s``: flips between a and b every period
                                (>= 2 s: libfaketime re-reads its file about every 2 s).
reset-clock        clock        every node back to +0s (stops strobes). ``offset_s``: 0.
start-netem        netem        invoke: target keys as kill, ``links`` (all | peers | client |
                                [node names and/or "client"]), ``delay_ms``, ``jitter_ms``,
                                ``loss_pct``, ``reorder_pct``, ``mechanism`` (auto | netem |
                                iptables). completed: ``nodes`` shaped, ``to`` {node: "all" or
                                [destination addresses]}, the shape, ``mechanism`` {node:
                                "netem" | "iptables"}, ``delayer_pid`` {node: pid}.
stop-netem         netem        ``nodes``: every node healed (our qdiscs, chains, delayers removed).
elect-preferred    planned-     invoke: ``target`` leader, ``partition``/``partition_index``.
                   moves        an in-sync follower made preferred, then a preferred election.
                                completed: ``leader``, ``new_leader``, ``replicas_before``,
                                ``replicas``, ``reorder``, ``election`` (Kafka's answers).
reassign-partition planned-     as elect-preferred; reassigns the partition off its leader:
                   moves        ``replicas``, ``reassign`` (the tool's answer).
controlled-        planned-     as elect-preferred; SIGTERM to the leader's broker, waited for:
shutdown           moves        ``exit_s``, ``forced``.
end-move           planned-     restarts shut-down brokers, cancels and undoes reassignments:
                   moves        ``restarted``, ``cancel``, ``restore`` (nemesis.operations).
remove-controller  quorum-     invoke: ``target`` active-controller | controllers, ``node_index``,
                   changes      ``decommission``. kafka-metadata-quorum remove-controller (dynamic
                                quorum): ``controller``, ``answer``, ``voters_before``/``_after``.
add-controller     quorum-     puts removed controllers back (``target`` "all": every non-voter):
                   changes      ``answers`` {node: [tool answers]}, ``voters_after`` (nemesis.quorum).
=================  ===========  ============================================================

A nemesis op whose action failed on some nodes completes with
``value["errors"]`` {node: text} and an ``error`` field.

``packages.heal_all(cluster, restart_dead=..., restart_skewed=...)`` heals
everything without any nemesis state (final phase, interrupts, ``kchaos
nemesis heal``). Mind the clock: Kafka's timers (KRaft fetch and election
timeouts, replica lag) run on wall time and stall after it goes back, for as
long as it went back; a broker whose clock was set forward and then reset can
fail to take part in a controller election for that long. ``restart_skewed``
restarts such brokers.
"""
