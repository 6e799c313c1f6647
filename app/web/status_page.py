"""The worker's status page (``GET /``) in the frame both services share
(``envsettings/status_page.py``): one HTML document, no build step, no outside assets.

Its script reads the worker's own JSON endpoints every two seconds (``/ready``, ``/stats``)
and draws them: whether the worker is ready, the transaction protocol, one row per partition it
owns (state, lag, ids held, effective window, last commit and its latency, records forwarded,
repeats dropped, dead letters, and the window the size cap will leave at the observed new-id
rate, "short:" when that is under DEDUPE_MIN_WINDOW) and the standby copies it keeps. The
lookup box asks ``/messages/{id}`` (any worker answers for any id: it forwards to the owner)
and shows the answer; ``/?id=<messageId>`` looks an id up on load, for links from logs and alerts.
The page shows what the endpoints say and nothing more: docs/operations.md explains each figure.
"""

from __future__ import annotations

from envsettings.status_page import page

BODY = """\
<h1>dedup worker <span id="ready" class="badge wait">loading</span></h1>
<div class="muted" id="protocol"></div>
<h2>Partitions</h2>
<table id="partitions"><thead><tr>
  <th>partition</th><th>state</th><th>lag</th><th>ids held</th><th>effective window</th>
  <th>last commit</th><th>commit latency</th><th>forwarded</th><th>repeats dropped</th>
  <th>dead-lettered</th><th>window the cap will leave</th>
</tr></thead><tbody></tbody></table>
<h2>Standby copies</h2>
<table id="standbys"><thead><tr><th>changelog partition</th><th>lag</th></tr></thead>
<tbody></tbody></table>
<h2>Look an id up</h2>
<form id="lookup"><input id="id" name="id" placeholder="messageId" autocomplete="off">
<button type="submit">Look up</button></form>
<div id="answer"></div>
"""

SCRIPT = """\
const num = (n) => (n === null || n === undefined) ? "-" : Number(n).toLocaleString("en");
function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, seconds);
  if (s < 120) return s.toFixed(0) + " s";
  if (s < 7200) return (s / 60).toFixed(0) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " days";
}
function forecast(f) {
  if (!f || f.predicted_window_ms === null) return "-";
  return (f.warning ? "short: " : "") + age(f.predicted_window_ms / 1000);
}
function cells(row, values) {
  const tr = document.createElement("tr");
  for (const [key, value] of Object.entries(row)) tr.dataset[key] = value;
  for (const v of values) {
    const td = document.createElement("td");
    td.textContent = v;
    tr.appendChild(td);
  }
  return tr;
}
async function refresh() {
  try {
    const ready = await (await fetch("/ready")).json();
    $("ready").textContent = ready.ready ? "ready" : "recovering";
    $("ready").className = "badge " + (ready.ready ? "ok" : "wait");
    const stats = await (await fetch("/stats")).json();
    const txn = stats.transactions;
    $("protocol").textContent = txn ? "transactions " + (txn.protocol || JSON.stringify(txn)) : "";
    const now = Date.now() / 1000;
    const body = $("partitions").tBodies[0];
    body.replaceChildren(...Object.entries(stats.partitions).map(([p, s]) => cells(
      {partition: p},
      [p, s.state, num(s.consumer_lag), num(s.ids_held),
       s.effective_window_ms === null ? "full" : age(s.effective_window_ms / 1000),
       s.last_commit_at ? age(now - s.last_commit_at) + " ago" : "-",
       s.last_commit_seconds === null ? "-" : (s.last_commit_seconds * 1000).toFixed(0) + " ms",
       num(s.forwarded), num(s.duplicates_dropped), num(s.dead_lettered),
       forecast(s.window_forecast)])));
    $("standbys").tBodies[0].replaceChildren(...Object.entries(stats.standbys).map(
      ([name, s]) => cells({standby: name}, [name, num(s.lag)])));
  } catch (err) {
    $("ready").textContent = "unreachable";
    $("ready").className = "badge bad";
  }
}
async function lookup(id) {
  $("answer").textContent = "asking...";
  const response = await fetch("/messages/" + encodeURIComponent(id));
  const a = await response.json();
  $("answer").dataset.status = response.status;
  if (response.status === 200) {
    const repeats = a.repeats_dropped === null ? "" : `${a.repeats_dropped} repeats dropped; `;
    $("answer").textContent = `${a.messageId}: held since ${a.first_seen}, ${repeats}` +
      "forwarded once to " +
      `${a.output.topic}-${a.output.partition} at offset ${a.output.offset ?? "unknown"}`;
  } else if (response.status === 404) {
    $("answer").textContent = `${id}: not held (partition ${a.partition}): never seen, ` +
      "or aged out of the window";
  } else {
    $("answer").textContent = `${id}: ${a.error || response.status}`;
  }
}
$("lookup").addEventListener("submit", (e) => { e.preventDefault(); lookup($("id").value); });
const asked = new URLSearchParams(location.search).get("id");
if (asked) { $("id").value = asked; lookup(asked); }
refresh();
setInterval(refresh, 2000);
"""

STYLE = """\
  form { margin: .5rem 0; } input { width: 22rem; padding: .3rem; }
  #answer { white-space: pre-wrap; background: #f4f6fa; padding: .6rem; min-height: 1.2rem; }
"""

PAGE = page("dedup worker", BODY, SCRIPT, STYLE)
