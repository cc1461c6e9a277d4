// The AWS SDK for JavaScript v3 against a dynalab router: node sdk_check.mjs <endpoint> <table>.
// Creates the table, writes and reads an item, and provokes three errors; prints one JSON object
// with what the SDK made of each reply (its error name and message, parsed from `__type` and the
// message key), for tests/integration/test_sdks.py to check.
import {
  CreateTableCommand,
  DescribeTableCommand,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
  ScanCommand,
  waitUntilTableExists,
} from "@aws-sdk/client-dynamodb";

const [endpoint, table] = process.argv.slice(2);
const client = new DynamoDBClient({
  endpoint,
  region: "us-east-1",
  credentials: { accessKeyId: "any", secretAccessKey: "any" },
  maxAttempts: 1,
});

async function failure(command) {
  try {
    await client.send(command);
    return null;
  } catch (error) {
    return { name: error.name, message: error.message, status: error.$metadata?.httpStatusCode };
  }
}

await client.send(
  new CreateTableCommand({
    TableName: table,
    KeySchema: [{ AttributeName: "pk", KeyType: "HASH" }],
    AttributeDefinitions: [{ AttributeName: "pk", AttributeType: "S" }],
    BillingMode: "PAY_PER_REQUEST",
  }),
);
await waitUntilTableExists({ client, maxWaitTime: 30 }, { TableName: table });
await client.send(new PutItemCommand({ TableName: table, Item: { pk: { S: "a" }, n: { N: "1" } } }));
const got = await client.send(new GetItemCommand({ TableName: table, Key: { pk: { S: "a" } } }));

const result = {
  item: got.Item,
  conditional: await failure(
    new PutItemCommand({
      TableName: table,
      Item: { pk: { S: "a" } },
      ConditionExpression: "attribute_not_exists(pk)",
    }),
  ),
  notFound: await failure(new DescribeTableCommand({ TableName: "no-such-table" })),
  validation: await failure(new ScanCommand({ TableName: table, Limit: 0 })),
};
console.log(JSON.stringify(result));
client.destroy();
