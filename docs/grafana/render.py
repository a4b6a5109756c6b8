"""Draws the panels of idem-dashboard.json from scrapes of a service's
/metrics, without Prometheus or Grafana: how docs/grafana/idem-dashboard.png
was made, from a real run of the order service.

Scrape while the service runs (one JSON line per scrape, every 3 s):

    while sleep 3; do
      jq -cn --arg m "$(curl -s localhost:8080/metrics)" --argjson t "$(date +%s.%N)" '{t: $t, metrics: $m}'
    done > scrapes.jsonl

then, in a virtualenv with matplotlib (`python3 -m venv /tmp/mpl &&
/tmp/mpl/bin/pip install matplotlib`):

    /tmp/mpl/bin/python docs/grafana/render.py scrapes.jsonl out.png [events.txt]

`events.txt`, optional: one marker per line, `<seconds since the first
scrape> <label>`. Rates are taken over 15 s, as `rate(..[15s])` would;
a counter not exported yet counts as 0 (Prometheus would only see it
from its first export); latency quantiles are the exporter's own, over
its rolling window (metrics-exporter-prometheus renders the histogram as
a summary unless given buckets).
"""
import json
import re
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
WINDOW = 15.0
BG, PANEL, GRID, TEXT = "#111217", "#181b1f", "#2c3235", "#ccccdc"
COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#a0a0a0", "#37c8c8", "#c4162a", "#fade2a"]


def parse(text):
    """{(name, frozenset(labels)): value} of one scrape."""
    out = {}
    for line in text.splitlines():
        match = LINE.match(line.strip())
        if not match or line.startswith("#"):
            continue
        name, _, labels, value = match.groups()
        out[(name, frozenset(LABEL.findall(labels or "")))] = float(value)
    return out


def load(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    t0 = rows[0]["t"]
    return [(row["t"] - t0, parse(row["metrics"])) for row in rows]


def series(scrapes, name, keep, by, zero=False):
    """Time series of `name`, summed by the labels `by`, over samples whose
    labels pass `keep`; with `zero`, 0 at the scrapes before a series appears."""
    out = defaultdict(list)
    for t, sample in scrapes:
        sums = defaultdict(float)
        for (metric, labels), value in sample.items():
            labels = dict(labels)
            if metric == name and keep(labels):
                sums[tuple(labels.get(label, "") for label in by)] += value
        for key, value in sums.items():
            out[key].append((t, value))
    if zero:
        times = [t for t, _ in scrapes]
        for key, points in out.items():
            first = points[0][0]
            out[key] = [(t, 0.0) for t in times if t < first] + points
    return out


def rate(points):
    """Per-second increase over the last WINDOW seconds, at each scrape."""
    out = []
    for i, (t, value) in enumerate(points):
        # The whole window once there is one, as rate() would; a shorter
        # one at the start of the run.
        span = min(WINDOW - 0.5, t - points[0][0])
        earlier = [(s, v) for s, v in points[:i] if t - s >= span > 0]
        if earlier:
            s, v = earlier[-1]
            out.append((t, max(0.0, value - v) / (t - s)))
    return out


def panel(ax, title, unit=""):
    ax.set_facecolor(PANEL)
    ax.set_title(title, color=TEXT, loc="left", fontsize=10, fontweight="bold")
    ax.tick_params(colors=TEXT, labelsize=8)
    ax.grid(color=GRID, linewidth=0.6)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if unit:
        ax.set_ylabel(unit, color=TEXT, fontsize=8)


def draw(ax, lines, events, legend=True, fill=False, outside=False, colors=COLORS):
    for i, (label, points) in enumerate(lines):
        if not points:
            continue
        xs, ys = zip(*points)
        color = colors[i % len(colors)]
        ax.plot(xs, ys, color=color, linewidth=1.4, label=label, drawstyle="steps-post" if fill else "default")
        if fill:
            ax.fill_between(xs, ys, step="post", color=color, alpha=0.4)
    for t, label in events:
        ax.axvline(t, color="#8e8e8e", linewidth=0.8, linestyle=":")
    if legend and any(points for _, points in lines):
        where = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if outside else {"loc": "upper left", "ncol": 2}
        ax.legend(fontsize=7, facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT, **where)


def headroom(ax, lines):
    """Room above the lines for the legend."""
    top = max((v for _, points in lines for _, v in points), default=1.0)
    ax.set_ylim(0, top * 1.8 or 1.0)


def main(source, target, events_path=None):
    scrapes = load(source)
    events = []
    if events_path:
        for line in open(events_path):
            if line.strip():
                t, label = line.strip().split(" ", 1)
                events.append((float(t), label))
    end = scrapes[-1][0]
    fig = plt.figure(figsize=(16, 11), facecolor=BG)
    grid = fig.add_gridspec(3, 6, hspace=0.38, wspace=0.45, left=0.05, right=0.98, top=0.93, bottom=0.05)
    fig.suptitle("idem  ·  the dashboard's panels, drawn from /metrics scrapes (not a Grafana screenshot)",
                 color=TEXT, x=0.05, ha="left")

    # Requests by outcome and route, rate.
    ax = fig.add_subplot(grid[0, :5])
    panel(ax, "Requests by outcome and route (rate, req/s)")
    requests = series(scrapes, "idem_requests_total", lambda labels: True, ("route", "outcome"), zero=True)
    lines = [(f"{route} {outcome}", rate(points)) for (route, outcome), points in sorted(requests.items())]
    draw(ax, lines, events, outside=True)
    headroom(ax, lines)
    for i, (t, label) in enumerate(events):
        ax.annotate(label, (t, 1), xycoords=("data", "axes fraction"), xytext=(3, -10 - 10 * (i % 2)),
                    textcoords="offset points", color="#a0a0a0", fontsize=7)

    # Store latency p50 / p99 by op.
    ax = fig.add_subplot(grid[1, :3])
    panel(ax, "Store call latency p50 / p99 by op", "ms")
    lines = []
    for quantile in ("0.5", "0.99"):
        latency = series(scrapes, "idem_store_call_seconds", lambda labels, q=quantile: labels.get("quantile") == q, ("op",))
        for (op,), points in sorted(latency.items()):
            lines.append((f"p{float(quantile) * 100:g} {op}", [(t, v * 1000) for t, v in points]))
    draw(ax, lines, events)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 4)

    # In flight, mismatch, store error.
    ax = fig.add_subplot(grid[1, 3:])
    panel(ax, "409 in-flight / 422 mismatch / 503 store_error (rate, req/s)")
    wanted = ("in_flight", "mismatch", "store_error")
    trouble = series(scrapes, "idem_requests_total", lambda labels: labels.get("outcome") in wanted, ("outcome",), True)
    lines = [(outcome, rate(trouble.get((outcome,), []))) for outcome in wanted]
    draw(ax, lines, events)
    headroom(ax, lines)

    # Running and held executions.
    ax = fig.add_subplot(grid[2, :2])
    panel(ax, "Running executions (sum)")
    running = series(scrapes, "idem_executions_running", lambda labels: True, ())
    draw(ax, [("idem_executions_running", running.get((), []))], events, legend=False)
    ax.set_ylim(bottom=0)
    ax = fig.add_subplot(grid[2, 2:4])
    panel(ax, "Held executions (max over processes; alert when > 0)")
    held = series(scrapes, "idem_executions_held", lambda labels: True, ())
    points = held.get((), [])
    draw(ax, [("idem_executions_held", points)], events, legend=False, fill=True, colors=["#f2495c"])
    ax.set_ylim(bottom=0)
    ax.set_xlim(0, end)

    # The memory store's fill.
    ax = fig.add_subplot(grid[2, 4:])
    panel(ax, "Memory store: bytes held / bound", "%")
    used = series(scrapes, "idem_memory_store_bytes", lambda labels: True, ())
    bound = series(scrapes, "idem_memory_store_max_bytes", lambda labels: True, ())
    if used and bound:
        limit = dict(bound[()])
        draw(ax, [("fill", [(t, 100 * v / limit[t]) for t, v in used[()] if limit.get(t)])], events, legend=False)
    else:
        ax.text(0.5, 0.5, "No data\n(no MemoryStore in this run)", color=TEXT, ha="center", va="center",
                transform=ax.transAxes, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in fig.axes:
        if ax.get_xticks().size:
            ax.set_xlim(0, end)
            ax.set_xlabel("seconds", color=TEXT, fontsize=8)
    fig.savefig(target, dpi=90, facecolor=BG)


if __name__ == "__main__":
    main(*sys.argv[1:4])
