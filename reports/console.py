"""The console summary printed at the end of a run (and by ``kchaos analyze``)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from checkers.groups import GROUP_TYPES
from checkers.progress import ProgressSeconds
from checkers.txn import TXN_TYPES

from .elections_page import unknown_reasons
from .load import INVALID, VALID, load_run

_STYLE = {VALID: "bold green", INVALID: "bold red"}


def idle_types(results: dict) -> set[str]:
    """Anomaly types of a family the run never exercised (transactions without
    txn ops, group checks without commits or rebalances): 0 says nothing there."""
    ops = set(((results or {}).get("stats") or {}).get("ops") or {})
    idle: set[str] = set()
    if "txn" not in ops:
        idle |= set(TXN_TYPES)
    if not ops & {"commit", "rebalance"}:
        idle |= set(GROUP_TYPES)
    return idle


def never_drained(results: dict | None) -> bool:
    """The run recorded no final drain at all (interrupted or killed before it):
    its unseen writes are unseen because nothing read them at the end, which says
    more than the count of unseen writes. Results from before the checkers counted
    drains (no ``stats.drains``) say nothing either way."""
    drains = ((results or {}).get("stats") or {}).get("drains")
    return isinstance(drains, dict) and not drains.get("ops")


def why_unknown(results: dict | None) -> list[str]:
    """The lines under an unknown verdict: whether the run reached its final
    drain, then the checkers' reasons (results.json's ``unknown``)."""
    lines = ["the run never reached its final drain (interrupted or killed): no read at the end "
             "looked for the acknowledged writes"] if never_drained(results) else []
    return lines + unknown_reasons(results)


def progress_line(results: dict | None) -> str | None:
    """The checkers' fault seconds with writes acknowledged where no fault reached
    (results.json ``stats.fault_progress``; docs/design.md, "Progress where a
    fault does not reach"), as a line; None for a run without faults."""
    stat = ((results or {}).get("stats") or {}).get("fault_progress")
    if not isinstance(stat, dict) or not isinstance(stat.get("fault_seconds"), int):
        return None
    seconds, progressing = stat["fault_seconds"], stat.get("with_acks_on_unimpaired")
    if not isinstance(progressing, int):
        return None
    return ProgressSeconds(seconds, progressing).line()


def console_summary(run_dir: Path, console: Console | None = None) -> None:
    """Print a table of anomaly counts (type, count, allowed), the verdict (an
    unknown one with its reasons under it) and the report's path."""
    console = console or Console()
    run = load_run(Path(run_dir))
    verdict = run.verdict
    has_results = run.results is not None
    table = Table(title=Text(f"kchaos: {run.name}"), title_justify="left")
    table.add_column("anomaly")
    table.add_column("count", justify="right")
    table.add_column("allowed")
    idle = idle_types(run.results) if has_results else set()
    folded = 0
    for a in run.anomalies():
        if a.type in idle and a.present and not a.error and not a.count:
            folded += 1
            continue
        if not has_results or not a.present or a.error:
            count = Text("?", style="yellow")
        elif a.failing:
            count = Text(str(a.count), style="bold red")
        elif a.count:
            count = Text(str(a.count), style="cyan")
        else:
            count = Text("0", style="dim")
        allowed = Text("yes" + (f" ({a.reason})" if a.reason else ""), style="cyan") if a.allowed \
            else Text("no", style="dim" if not a.failing else "")
        table.add_row(Text(a.type), count, allowed)
    console.print(table)
    if folded:
        console.print(Text(f"{folded} transaction and consumer-group checks not listed: the run had no "
                           f"transactions, commits or rebalances to check", style="dim"))
    wa = run.write_availability()
    if wa is not None:
        console.print(Text(wa.line()))
    if (progress := progress_line(run.results)) is not None:
        console.print(Text(progress))
    for note in run.notes:
        console.print(Text("note: ", style="yellow") + Text(note))
    for err in run.errors:
        console.print(Text("checker error: ", style="red") + Text(err))
    label = {VALID: "valid", INVALID: "INVALID"}.get(verdict, "unknown")
    console.print(Text("verdict: ") + Text(label, style=_STYLE.get(verdict, "bold yellow")))
    if verdict not in (VALID, INVALID):
        for why in why_unknown(run.results):
            console.print(Text("  because ", style="yellow") + Text(why))
    report = Path(run_dir) / "report.html"
    if report.exists():
        console.print(Text("report: ") + Text(str(report.resolve()), style="underline"))
    else:
        console.print(Text("report: ") + Text("not rendered yet", style="dim"))
