// The same checks in a browser page (tests/integration/test_sdks.py bundles this for the
// browser with esbuild and opens it in headless Chromium): the router's endpoint and the table
// come in the page's query string, and the result (or the error that stopped it) is posted back
// to the page's own origin, the test's server, as JSON.
import { check, clientFor } from "./sdk_calls.mjs";

const query = new URLSearchParams(window.location.search);
let outcome;
try {
  const client = clientFor(query.get("endpoint"));
  outcome = { result: await check(client, query.get("table")), agent: navigator.userAgent };
  client.destroy();
} catch (error) {
  outcome = { error: `${error.name}: ${error.message}`, agent: navigator.userAgent };
}
await fetch("/result", { method: "POST", body: JSON.stringify(outcome) });
