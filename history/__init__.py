"""The history: what a run records, on the ground floor.

Every other package reads and writes a run's history through this one, and it
imports none of them (tests/test_layering.py). Its modules, in the order a
run's ops travel (docs/design.md, "The history"):

* ``ops``: the contract, the fields and values of every op, and the reader
  of history.jsonl; ``fault_intervals``: the nemesis ops as fault intervals.
* ``writer``: the thread-safe appender the runner records through;
  ``recorder``: the writer plus counts, outstanding invocations and the
  highest acknowledged offsets, which the runner's console and final phase read.
* ``live_copy``: the process that pairs the JSONL into history.parquet
  as the run goes; ``child_process``: how the recording process's helper
  processes (that one, and the final drain's readers) start, report to it and
  die with it.
* ``paired``: paired ops, the one shape both checker engines read, and the
  Parquet schema; ``convert``: the columnar JSONL-to-Parquet conversion
  (it pairs; ``jsonl_blocks`` reads the lines, ``value_columns`` builds the
  messages of sends and polls); ``parquet``: writing, reading and judging the
  currency of history.parquet.
* ``message_index``: history.messages.parquet, every message by Kafka
  partition; ``row_groups``: a history.parquet's row groups and the reading of
  one; ``arrays``: Arrow columns as numpy arrays.
"""
