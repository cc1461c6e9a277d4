// The dashboard page: polls the router's /admin/cluster snapshot and redraws nodes, each table's
// key space and partitions, per-partition throughput charts and the router's transactions (uPlot,
// vendored). Text is set with textContent only, never parsed as HTML.
"use strict";

const NODE_COLOURS = ["#2563eb", "#9333ea", "#0d9488", "#ea580c", "#4f46e5", "#0891b2",
                      "#65a30d", "#c026d3"];
const CHARTS_PER_TABLE_MAX = 8;  // Charts drawn per table; the table lists every partition.
const CHART_WIDTH_PX = 420;
const CHART_HEIGHT_PX = 170;
const MIN_SPAN_S = 60;  // The narrowest time span a chart shows.
// A chart's kind: its series ([label, column of the history, colour, dashed, scale]) and axes.
const THROUGHPUT = {
  series: [
    ["write consumed", "write_consumed", "#2563eb", false, "units"],
    ["write allowed", "write_allowed", "#2563eb", true, "units"],
    ["read consumed", "read_consumed", "#15803d", false, "units"],
    ["read allowed", "read_allowed", "#15803d", true, "units"],
    ["throttled req/s", "throttled", "#d62728", false, "requests"],
  ],
  axes: [{scale: "units", label: "units/s"},
         {scale: "requests", side: 1, label: "req/s", grid: {show: false}}],
  columns: (history) => ({...history, throttled: history.at.map(
    (_, i) => history.read_throttled[i] + history.write_throttled[i])}),
};
const TRANSACTIONS = {
  series: [
    ["committed/s", "committed", "#15803d", false, "rate"],
    ["cancelled/s", "cancelled", "#ea580c", false, "rate"],
    ["conflicts/s", "conflicts", "#d62728", true, "rate"],
  ],
  axes: [{scale: "rate", label: "transactions/s"}],
  columns: (history) => history,
};

const plots = new Map();  // chart key -> {element, plot}
let snapshots = 0;
let pollSeconds = 2;

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name === "class") node.className = value;
    else if (name === "style") node.style.cssText = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

function rate(x) {
  return x === null || x === undefined ? "-" : x.toFixed(x < 10 ? 1 : 0);
}

function ago(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  return `${Math.round(seconds / 60)} min`;
}

function nodeColour(colours, node) {
  return colours.get(node) || "#6b7280";
}

function renderNodes(doc, colours) {
  const box = document.getElementById("nodes");
  box.replaceChildren();
  for (const node of doc.nodes) {
    const state = node.state || "unknown";
    const card = el("div", {class: `node ${state}`, "data-node": node.id, "data-state": state,
                           style: `--node-colour: ${nodeColour(colours, node.id)}`},
      el("h3", {}, node.id, node.holds_catalog ? " (catalog)" : ""),
      el("div", {}, el("span", {class: `state ${state}`}, state), " ", node.address || ""));
    if (state !== "up") {
      const seen = node.last_seen === null ? "never answered"
        : `last answered ${ago(doc.at - node.last_seen)} ago`;
      card.append(el("div", {class: "muted"}, seen), el("div", {class: "muted"}, node.error || ""));
    } else if (node.throughput_enforced === false) {
      card.append(el("div", {class: "muted"}, "throughput not enforced"));
    }
    box.append(card);
  }
  const catalog = document.getElementById("catalog");
  catalog.textContent = doc.catalog.readable
    ? (doc.catalog.nodes.length > 1
      ? `The catalog is replicated on ${doc.catalog.nodes.join(", ")}.`
      : `The catalog is on ${doc.catalog.node}.`)
    : `The catalog cannot be read (${doc.catalog.error}); showing the last copy.`;
}

function throttledInWindow(partition) {
  return partition.window.read_throttled_requests + partition.window.write_throttled_requests;
}

// A partition's id without its table's id in front (ids are "<table id>-<n>" and the like).
function shortId(table, id) {
  return id.startsWith(`${table.id}-`) ? id.slice(table.id.length + 1) : id;
}

// The node serving a partition's writes: its replicas' leader if it is replicated and one
// reported leading, else the node the catalog places it on.
function servingNode(p) {
  const leader = (p.replicas || []).find((r) => r.role === "leader");
  return leader ? leader.node : p.node;
}

// Where a partition is: its node, or each of a replicated one's replicas: the leader starred, a
// follower's entries behind its leader after a minus, a replica its node did not report
// (down, cut off, still copying) with "?", an unreachable node said so.
function whereText(p) {
  if (!p.replicas) return p.node_state === "up" ? p.node : `${p.node} (${p.node_state})`;
  return p.replicas.map((r) => {
    let text = r.node;
    if (r.role === "leader") text += "*";
    else if (r.role === null) text += "?";
    else if (r.role === "copying") text += " (copying)";
    else if (r.lag) text += ` -${r.lag}`;
    if (r.node_state && r.node_state !== "up") text += ` (${r.node_state})`;
    return text;
  }).join(" ");
}

function keySpace(table, partitions, colours, extraClass) {
  const bar = el("div", {class: `keyspace ${extraClass}`});
  for (const p of partitions) {
    const width = (p.range[1] - p.range[0]) * 100;
    const classes = ["partition"];
    if (p.node_state && p.node_state !== "up") classes.push("unreachable");
    if (throttledInWindow(p) > 0) classes.push("throttled");
    const node = servingNode(p);
    const block = el("div", {class: classes.join(" "), "data-partition": p.id,
                             style: `width: ${width}%; --node-colour: ${nodeColour(colours, node)}`,
                             title: `${p.id} on ${whereText(p)}, epoch ${p.epoch}, `
                               + `${p.state}, ${p.item_count ?? "?"} items, ${bytes(p.size_bytes)}`},
      `p${shortId(table, p.id)} · ${node} · e${p.epoch}`);
    bar.append(block);
  }
  return bar;
}

function partitionRows(partitions) {
  const head = el("tr", {}, ...["partition", "node", "key range", "items", "size", "epoch", "state",
    "read units/s", "write units/s", "throttled (window)"].map((h) => el("th", {}, h)));
  const rows = partitions.map((p) => {
    const t = p.throughput;
    const read = t ? `${rate(t.read.consumed_per_second)} / ${rate(t.read.allowed_per_second)}` : "-";
    const write = t ? `${rate(t.write.consumed_per_second)} / ${rate(t.write.allowed_per_second)}`
      : "-";
    const throttled = throttledInWindow(p);
    return el("tr", {"data-partition": p.id},
      el("td", {}, p.id),
      el("td", {"data-where": p.id}, whereText(p)),
      el("td", {}, `${(p.range[0] * 100).toFixed(1)}–${(p.range[1] * 100).toFixed(1)}%`),
      el("td", {}, p.item_count ?? "?"),
      el("td", {}, bytes(p.size_bytes)),
      el("td", {}, p.epoch),
      el("td", {}, p.parent ? `${p.state} (from ${p.parent})` : p.state),
      el("td", {}, read),
      el("td", {}, write),
      el("td", {class: throttled > 0 ? "throttling" : ""}, throttled));
  });
  return el("table", {class: "partitions"}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function chartData(kind, history) {
  const columns = kind.columns(history);
  return [history.at, ...kind.series.map(([, column]) => columns[column])];
}

function chart(kind, key, title, history) {
  let entry = plots.get(key);
  if (!entry) {
    const element = el("div", {class: "chart", "data-chart": key}, el("h4", {}, title));
    // At least a minute wide, so that the first few samples do not fill the chart.
    const scales = {x: {time: true, range: (u, min, max) => [Math.min(min, max - MIN_SPAN_S), max]}};
    for (const axis of kind.axes) scales[axis.scale] = {auto: true};
    const options = {
      width: CHART_WIDTH_PX,
      height: CHART_HEIGHT_PX,
      legend: {live: false},
      scales,
      axes: [{}, ...kind.axes],
      series: [{}, ...kind.series.map(([label, , colour, dashed, scale]) => ({
        label, scale, stroke: colour, width: 2, dash: dashed ? [6, 4] : undefined}))],
    };
    const plot = new uPlot(options, chartData(kind, history), element);
    entry = {element, plot};
    plots.set(key, entry);
  } else {
    entry.plot.setData(chartData(kind, history));
  }
  entry.element.dataset.points = String(history.at.length);
  entry.seen = snapshots;
  return entry.element;
}

function renderTable(table, colours) {
  const box = el("div", {class: "table", "data-table": table.name});
  const units = table.billing_mode === "PROVISIONED"
    ? `${table.provisioned.read} RCU / ${table.provisioned.write} WCU` : "on demand";
  box.append(
    el("h3", {}, table.name),
    el("div", {class: "muted"}, `${table.status} · ${units} · ${table.item_count} items · `
      + `${bytes(table.size_bytes)} · ${table.partitions.length} partitions`
      + (table.partitions_reporting < table.partitions.length
        ? ` (${table.partitions.length - table.partitions_reporting} not reporting)` : "")),
    keySpace(table, table.partitions, colours, "table"),
    partitionRows(table.partitions));
  const extras = el("div", {class: "extras"});
  for (const index of table.indexes) {
    const line = el("div", {"data-index": index.name},
      `index ${index.name} (${index.kind}, ${index.projection}): ${index.status}`);
    if (index.backfill) {
      line.append(` · backfilled ${index.backfill.partitions_done} of `
        + `${index.backfill.partitions} partitions`
        + (index.backfill.percentage === null ? "" : ` (${index.backfill.percentage}%)`)
        + (index.backfill.items_per_second == null ? ""
          : `, ${Math.round(index.backfill.items_per_second)} items/s`)
        + (index.backfill.seconds_left == null ? ""
          : `, ${Math.ceil(index.backfill.seconds_left)} s left`));
    }
    if (index.kind === "global") {
      line.append(` · ${index.item_count} entries`);
      extras.append(line, keySpace(index, index.partitions, colours, "index"));
    } else {
      extras.append(line);
    }
  }
  for (const consumer of table.change_feed_consumers) {
    extras.append(el("div", {"data-consumer": consumer.consumer},
      `change feed ${consumer.consumer}: ${consumer.records_behind} records behind`));
  }
  if (table.ttl) {
    extras.append(el("div", {}, `TTL on ${table.ttl.attribute}: `
      + `${table.ttl.enabled ? "enabled" : "disabled"} · ${table.ttl.deleted_items} items deleted`));
  }
  box.append(extras);
  const charts = el("div", {class: "charts"});
  const charted = [...table.partitions]
    .sort((a, b) => throttledInWindow(b) - throttledInWindow(a))
    .slice(0, CHARTS_PER_TABLE_MAX)
    .filter((p) => p.history.at.length > 0);
  for (const p of charted) {
    charts.append(chart(THROUGHPUT, `${table.name}/${p.id}`, `${p.id} on ${p.node}`, p.history));
  }
  box.append(charts);
  return box;
}

function renderTransactions(txn) {
  const counts = (record) => Object.entries(record).map(([name, n]) => `${n} ${name}`).join(", ");
  const lines = [
    el("div", {"data-transactions": "outcomes"},
      `coordinated: ${counts(txn.outcomes) || "none yet"} · ${txn.conflicts} conflicts`),
    el("div", {"data-transactions": "in-doubt"},
      `in doubt: ${txn.in_doubt}`
      + (txn.oldest_in_doubt_seconds === null ? "" : ` (oldest ${ago(txn.oldest_in_doubt_seconds)})`)
      + ` · finished for routers that died: ${counts(txn.resolved) || "none"}`),
  ];
  const charts = el("div", {class: "charts"});
  if (txn.history.at.length > 0) {
    charts.append(chart(TRANSACTIONS, "transactions", "transactions this router coordinated",
      txn.history));
  }
  document.getElementById("transactions").replaceChildren(...lines, charts);
}

function render(doc) {
  snapshots += 1;
  pollSeconds = doc.sample_seconds;
  const colours = new Map(doc.nodes.map((n, i) => [n.id, NODE_COLOURS[i % NODE_COLOURS.length]]));
  document.getElementById("router").textContent = `router ${doc.router}`;
  document.getElementById("refreshed").textContent =
    `updated ${new Date(doc.at * 1000).toLocaleTimeString()}`;
  document.getElementById("window").textContent = ago(doc.window_seconds);
  renderNodes(doc, colours);
  const tables = document.getElementById("tables");
  tables.replaceChildren(...doc.tables.map((t) => renderTable(t, colours)));
  if (doc.tables.length === 0) tables.append(el("p", {class: "muted"}, "No tables yet."));
  renderTransactions(doc.transactions);
  for (const [key, entry] of plots) {
    if (entry.seen !== snapshots) { entry.plot.destroy(); plots.delete(key); }
  }
  document.body.dataset.snapshots = String(snapshots);
}

async function poll() {
  const problem = document.getElementById("problem");
  try {
    const reply = await fetch("/admin/cluster", {cache: "no-store"});
    if (!reply.ok) throw new Error(`the router answered ${reply.status}`);
    render(await reply.json());
    problem.hidden = true;
  } catch (error) {
    problem.textContent = `cannot refresh: ${error.message}`;
    problem.hidden = false;
  }
  setTimeout(poll, pollSeconds * 1000);
}

poll();
