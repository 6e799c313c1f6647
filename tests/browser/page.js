// The page of the browser tier (tests/browser/test_analytics_js.py), bundled with Segment's
// analytics.js SDK by esbuild (`make browser-install`). Served on one origin, it sends to the
// ingest service on another, as a site sends to its tracking API. Settings are given inline
// (no CDN) and the query string says where the ingest is and what to send:
//   ?ingest=127.0.0.1:19505&writeKey=...&tracks=200&pages=20&identifies=20&paceMs=20
// Every messageId the SDK assigned, and any error, is posted to /report on the page's origin.
import { AnalyticsBrowser } from '@segment/analytics-next'

const params = new URLSearchParams(location.search)
const count = (name) => Number(params.get(name) ?? 0)

function report(doc) {
  return fetch('/report', { method: 'POST', body: JSON.stringify(doc) })
}

// One call a tick: identify and page calls spread among the tracks, so each kind of request
// (/v1/i, /v1/p, /v1/t) is in flight when the ingest restarts.
function plan() {
  const kinds = []
  for (let i = 0; i < count('tracks'); i++) kinds.push('track')
  const spread = (kind, n) => {
    for (let i = 0; i < n; i++) {
      kinds.splice(Math.floor(((i + 0.5) * kinds.length) / n), 0, kind)
    }
  }
  spread('page', count('pages'))
  spread('identify', count('identifies'))
  return kinds
}

async function main() {
  const writeKey = params.get('writeKey')
  const apiHost = `${params.get('ingest')}/v1`
  const [analytics] = await AnalyticsBrowser.load(
    {
      writeKey,
      cdnSettings: {
        integrations: { 'Segment.io': { apiKey: writeKey, apiHost, protocol: 'http' } },
        // The SDK's own usage metrics, to the ingest's POST /v1/m.
        metrics: { host: apiHost, protocol: 'http', sampleRate: 1, flushTimer: 1000 },
      },
    },
    { integrations: { 'Segment.io': { apiHost, protocol: 'http' } } },
  )
  const ids = []
  const kinds = plan()
  for (let i = 0; i < kinds.length; i++) {
    let ctx
    if (kinds[i] === 'page') {
      ctx = await analytics.page('Docs', `Page ${i}`, { n: i })
    } else if (kinds[i] === 'identify') {
      ctx = await analytics.identify(`user-${i}`, { plan: 'pro', n: i })
    } else {
      ctx = await analytics.track('Order Completed', { n: i, total: 9.5 })
    }
    ids.push([kinds[i], ctx.event.messageId])
    await new Promise((resolve) => setTimeout(resolve, count('paceMs')))
  }
  await report({ ids })
}

main().catch((err) => report({ error: String((err && err.stack) || err) }))
