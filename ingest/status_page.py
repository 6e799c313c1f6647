"""The ingest service's status page (``GET /``) in the frame both services share
(``envsettings/status_page.py``): one HTML document, no build step.

Its script reads the service's own ``/metrics`` every two seconds and draws, per endpoint and
status code, the requests answered since the process started and their rate over the last
poll, the events Kafka acknowledged, the Kafka errors by class, and ``/ready``'s answer (a
series still at 0, exported before its first event, has no row). It
asks for nothing ``/metrics`` does not already say (docs/metrics.md), and the same token
guards both (``DEDUPE_INGEST_METRICS_TOKEN``).
"""

from __future__ import annotations

from envsettings.status_page import page

BODY = """\
<h1>dedup ingest <span id="ready" class="badge wait">loading</span></h1>
<div id="reason"></div>
<h2>Requests</h2>
<table id="requests"><thead><tr><th>endpoint</th><th>status</th><th>since start</th>
<th>per second</th></tr></thead><tbody></tbody></table>
<h2>Events acknowledged by Kafka</h2>
<table id="events"><thead><tr><th>endpoint</th><th>since start</th><th>per second</th></tr>
</thead><tbody></tbody></table>
<h2>Kafka errors</h2>
<table id="errors"><thead><tr><th>error</th><th>since start</th></tr></thead><tbody></tbody>
</table>
"""

SCRIPT = """\
let previous = null;
function samples(text, name) {
  const out = [];
  const pattern = new RegExp("^" + name + "\\\\{([^}]*)\\\\} ([0-9.eE+-]+)$");
  for (const line of text.split("\\n")) {
    const m = line.match(pattern);
    // A series still at 0 is one /metrics exports before its first event: no row for it.
    if (!m || Number(m[2]) === 0) continue;
    const labels = {};
    for (const pair of m[1].match(/\\w+="[^"]*"/g) || []) {
      const [k, v] = pair.split("=");
      labels[k] = v.slice(1, -1);
    }
    out.push({labels, value: Number(m[2])});
  }
  return out;
}
function fill(table, rows) {
  $(table).tBodies[0].replaceChildren(...rows.map(({key, cells, error}) => {
    const tr = document.createElement("tr");
    tr.dataset.key = key;
    if (error) tr.className = "error";
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    return tr;
  }));
}
async function refresh() {
  const ready = await fetch("/ready");
  const body = await ready.json();
  $("ready").textContent = ready.status === 200 ? "ready" : "unavailable";
  $("ready").className = "badge " + (ready.status === 200 ? "ok" : "bad");
  $("reason").textContent = body.reason || "";
  const text = await (await fetch("/metrics")).text();
  const now = Date.now() / 1000;
  const counts = {};
  const rate = (key, value) => {
    if (!previous || !(key in previous.counts)) return "-";
    return ((value - previous.counts[key]) / (now - previous.at)).toFixed(1);
  };
  const requests = samples(text, "dedupe_ingest_requests_total").map((s) => {
    const key = s.labels.endpoint + " " + s.labels.status;
    counts[key] = s.value;
    return {key, error: s.labels.status >= "500",
            cells: [s.labels.endpoint, s.labels.status, s.value.toLocaleString("en"),
                    rate(key, s.value)]};
  });
  const events = samples(text, "dedupe_ingest_events_total").map((s) => {
    const key = "events " + s.labels.endpoint;
    counts[key] = s.value;
    return {key, cells: [s.labels.endpoint, s.value.toLocaleString("en"), rate(key, s.value)]};
  });
  const errors = samples(text, "dedupe_ingest_kafka_errors_total").map((s) => (
    {key: s.labels.error, error: true, cells: [s.labels.error, s.value.toLocaleString("en")]}));
  fill("requests", requests);
  fill("events", events);
  fill("errors", errors);
  previous = {at: now, counts};
}
refresh();
setInterval(refresh, 2000);
"""

STYLE = """\
  tr.error td { color: #c62828; }
"""

PAGE = page("dedup ingest", BODY, SCRIPT, STYLE)
