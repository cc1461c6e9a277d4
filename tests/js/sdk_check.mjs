// The AWS SDK for JavaScript v3 against a dynalab router: node sdk_check.mjs <endpoint> <table>.
// Prints one JSON object with what the SDK made of each reply (sdk_calls.mjs), for
// tests/integration/test_sdks.py to check.
import { check, clientFor } from "./sdk_calls.mjs";

const [endpoint, table] = process.argv.slice(2);
const client = clientFor(endpoint);
console.log(JSON.stringify(await check(client, table)));
client.destroy();
