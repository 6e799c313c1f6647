"""Results of the contender benchmark: one record per contender, markdown tables, targets, chart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.measure import ratio

#: Worker processes of contender (f): one per core of the 2-core machines we bench on, as
#: Spark's ``local[2]``.
GROUP_WORKERS = 2
#: Contender keys, module and label, in the order they run. (c), the worker in an
#: at-least-once mode, was removed with that mode; the other letters keep their meaning.
CONTENDERS: dict[str, tuple[str, str]] = {
    "a": ("copy_eos", "(a) copy, EOS, no dedup"),
    "b": ("worker_eos", "(b) dedupe worker, exactly-once"),
    "d": ("quix_dedup", "(d) Quix Streams, exactly-once"),
    "e": ("spark_dedup", "(e) Spark dropDuplicatesWithinWatermark"),
    "f": ("worker_group", f"(f) dedupe worker, exactly-once, {GROUP_WORKERS} processes"),
    "g": ("kstreams_dedup", "(g) Kafka Streams, exactly_once_v2"),
    "h": ("kstreams_kv_dedup", "(h) Kafka Streams, key-value store + punctuator"),
}
#: (b)'s throughput target against the copy (a), per profile: where a fifth of the records are
#: repeats the worker writes less than the copy and must run ahead of it; elsewhere level.
COPY_FLOORS: dict[str, float] = {"dup20": 1.2}
#: Contenders that are meant to de-duplicate (everything but the copy).
DEDUPLICATING = frozenset("bdefgh")
#: Contenders that run our worker (``python -m app worker``, settings from the environment);
#: (f) runs two of them in one consumer group (``bench.contenders.worker_group``).
WORKERS = frozenset("bf")


@dataclass
class Result:
    """What one contender did with one profile."""

    key: str
    status: str = "not run"  # ok | incomplete | failed
    error: str = ""
    events: int = 0
    unique: int = 0
    sustained_eps: float | None = None
    overall_eps: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    latency_samples: int = 0
    latency_missing: int = 0
    peak_rss_bytes: int | None = None
    cpu_seconds: float | None = None
    disk_bytes: int | None = None
    #: ids the contender stored: unique backlog ids plus latency-phase ids that arrived
    stored_ids: int = 0
    out_total: int = 0
    out_distinct: int = 0
    missing: int = 0
    unexpected: int = 0
    notes: list[str] = field(default_factory=list)
    #: Over several rounds (``bench/rounds.py``): per other contender's key, the median of this
    #: one's throughput over that one's within each round. None: one round, ratios of this row.
    ratios: dict[str, float] | None = None

    def vs(self, other: Result | None) -> float | None:
        """Sustained throughput as a multiple of ``other``'s (None: either did not complete)."""
        if other is None or self.status != "ok" or other.status != "ok":
            return None
        if self.ratios is not None:
            return self.ratios.get(other.key)
        return ratio(self.sustained_eps, other.sustained_eps)

    @property
    def label(self) -> str:
        return CONTENDERS[self.key][1]

    @property
    def duplicates(self) -> int:
        """Output records beyond the first of their id (leaked repeats)."""
        return self.out_total - self.out_distinct

    @property
    def cpu_per_million(self) -> float | None:
        if self.cpu_seconds is None or not self.events:
            return None
        return self.cpu_seconds / self.events * 1e6

    @property
    def disk_per_id(self) -> float | None:
        if self.disk_bytes is None or not self.stored_ids:
            return None
        return self.disk_bytes / self.stored_ids

    @property
    def correct(self) -> str:
        """Whether the output is what the contender promises, in a word or two."""
        if self.status == "failed" and not self.out_total:
            return "-"
        if self.key not in DEDUPLICATING:
            ok = self.missing == 0 and self.unexpected == 0
            return "copy complete" if ok else f"NO ({self.missing:,} ids missing)"
        problems = []
        if self.missing:
            problems.append(f"{self.missing:,} missing")
        if self.duplicates:
            problems.append(f"{self.duplicates:,} duplicates")
        if self.unexpected:
            problems.append(f"{self.unexpected:,} unknown ids")
        return "yes" if not problems else "NO: " + ", ".join(problems)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_table(results: Sequence[Result]) -> str:
    """The markdown table of one profile (ratios against (a) and (b) when they ran)."""
    by_key = {r.key: r for r in results}
    head = (
        "| contender | status | events/s sustained | events/s incl. start-up | vs (a) | vs (b) "
        "| p50 ms | p99 ms | peak RSS MiB | CPU s / 1M events | disk B / id "
        "| output records | distinct ids | correct |"
    )
    rows = [head, "|" + "---|" * 14]
    for r in results:
        status = r.status if not r.error else f"{r.status}: {r.error}"
        rss = None if r.peak_rss_bytes is None else r.peak_rss_bytes / 2**20
        rows.append(
            f"| {r.label} | {status.replace('|', '/')} | {_num(r.sustained_eps)} "
            f"| {_num(r.overall_eps)} | {_ratio(r.vs(by_key.get('a')))} "
            f"| {_ratio(r.vs(by_key.get('b')))} | {_num(r.p50_ms)} | {_num(r.p99_ms)} "
            f"| {_num(rss)} | {_num(r.cpu_per_million, 1)} | {_num(r.disk_per_id, 1)} "
            f"| {r.out_total:,} | {r.out_distinct:,} | {r.correct} |"
        )
    return "\n".join(rows)


#: On a replicated cluster (replication 3: ``make bench-cluster``), (b)'s p99 at most this
#: multiple of the copy's p99 on the same cluster: every transaction there waits for three
#: replicas, for the copy as for us, so the copy's p99 is the floor the target builds on.
CLUSTER_P99_OF_COPY = 1.5


def targets(
    results: Sequence[Result],
    commit_interval: float,
    copy_floor: float = 1.0,
    replicated: bool = False,
) -> list[str]:
    """The targets for our exactly-once worker (b), each met, missed or unknown: ``copy_floor``
    times the copy's throughput (the profile's: :data:`COPY_FLOORS`), 1.2x both Kafka Streams
    stores, 2x Quix Streams, 1x Spark; p99 (``replicated``: against the copy's,
    :data:`CLUSTER_P99_OF_COPY`) and state bytes per id."""
    by_key = {r.key: r for r in results}
    b = by_key.get("b")
    out: list[str] = []

    def verdict(ok: bool | None) -> str:
        return "unknown" if ok is None else ("MET" if ok else "NOT MET")

    def lead(ratio_: float | None) -> str:
        return verdict(None if ratio_ is None else ratio_ > 1) + (
            "" if ratio_ is None else f" ({ratio_:.2f}x)"
        )

    b_done = b is not None and b.status == "ok"
    # (key, at least this multiple of its throughput): the targets for (b).
    floors = (("a", copy_floor), ("g", 1.2), ("h", 1.2), ("d", 2.0), ("e", 1.0))
    for key, floor in floors:
        other = by_key.get(key)
        if other is None:
            continue
        if b_done and other.status != "ok":
            out.append(f"(b) >= {floor:g}x {other.label}: unknown (it did not complete)")
            continue
        r = b.vs(other) if b is not None else None
        out.append(
            f"(b) >= {floor:g}x {other.label}: {verdict(None if r is None else r >= floor)}"
            + ("" if r is None else f" ({r:.2f}x)")
        )
    f, e = by_key.get("f"), by_key.get("e")
    if f is not None and e is not None:
        # Not one of the targets: our worker on both cores, as Spark's local[2] runs.
        out.append(
            f"(f), our worker on two processes, ahead of {e.label} (both on two cores): "
            + lead(f.vs(e))
        )
    p99 = b.p99_ms if b is not None else None
    limit: float | None
    if replicated:
        copy = by_key.get("a")
        copy_p99 = copy.p99_ms if copy is not None else None
        rule = f"{CLUSTER_P99_OF_COPY:g}x the copy's p99"
        limit = None if copy_p99 is None else copy_p99 * CLUSTER_P99_OF_COPY
    else:
        rule, limit = "commit interval + 50 ms", commit_interval * 1000 + 50
    out.append(
        f"(b) p99 <= {rule}"
        + ("" if limit is None else f" = {limit:.0f} ms")
        + f": {verdict(None if p99 is None or limit is None else p99 <= limit)}"
        + ("" if p99 is None else f" (p99 {p99:.0f} ms)")
    )
    mine = b.disk_per_id if b is not None else None
    for key in ("d", "e", "g", "h"):
        other = by_key.get(key)
        theirs = other.disk_per_id if other is not None else None
        if other is None:
            continue
        below = None if mine is None or theirs is None else mine < theirs
        out.append(
            f"(b) state bytes per id below {other.label}: {verdict(below)}"
            + ("" if below is None else f" ({mine:.1f} vs {theirs:.1f})")
        )
    return out


def write_chart(path: Path, profiles: dict[str, list[Result]]) -> None:
    """Bar charts: sustained throughput and p99 latency per contender, one column per profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(profiles)
    fig, axes = plt.subplots(2, len(names), figsize=(6 * len(names), 8), squeeze=False)
    for col, name in enumerate(names):
        results = profiles[name]
        labels = [f"({r.key})" for r in results]
        colors = ["#4c72b0" if r.status == "ok" else "#c44e52" for r in results]
        for row, (attr, title) in enumerate(
            [("sustained_eps", "events/s (sustained)"), ("p99_ms", "p99 latency (ms)")]
        ):
            ax = axes[row][col]
            values = [getattr(r, attr) or 0.0 for r in results]
            bars = ax.bar(labels, values, color=colors)
            for bar, r, v in zip(bars, results, values, strict=True):
                text = f"{v:,.0f}" if r.status == "ok" or v else r.status
                ax.annotate(
                    text,
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
            ax.set_title(f"{name}: {title}")
    legend = "; ".join(label for _, label in CONTENDERS.values())
    fig.text(0.5, 0.01, legend + "  (red: did not complete)", ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
